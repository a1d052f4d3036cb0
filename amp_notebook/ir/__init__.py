"""The static IR: messages and state, ops, graphs, validation, serialization and the reference interpreter."""
