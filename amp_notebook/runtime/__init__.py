"""The runtime: controller, worker state machine, placement, optimizers and backends."""
