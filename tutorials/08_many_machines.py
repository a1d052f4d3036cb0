# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 08 · Beyond one machine: the same graphs on Ray
#
# AMPNet was designed for networks of devices. Until now every worker was a thread of this kernel. With
# `backend="ray"` each worker becomes a [Ray](https://docs.ray.io) *actor*, a process that may sit on any
# machine of a cluster. The graph, the placement, the controller and the worker step are the same. Only
# the transport changes:
#
# * messages go from actor to actor as fire-and-forget calls, batched per destination, never through this
#   kernel;
# * the kernel is the controller: it learns that a key is complete by *weighted credit recovery*: each key
#   carries weight 1, split among its messages, and the weight comes back as messages end;
# * every actor ships its trace rows to the kernel, moved onto the kernel's clock, so the dashboard draws a
#   Ray run like a threaded one.
#
# The price is the hop. A thread hands a message over in microseconds; a Ray call costs more than ten
# times as much. This notebook measures both, shows where Ray pays off, and asks the simulator what 4, 16
# and 64 machines would do. Here "the cluster" is a local Ray on this machine; on a
# real cluster you pass its address: `amp.train(..., backend="ray", address="head-node:6379")` (see the
# docs page *Many machines (Ray)*, `docs/ray.md`, for `ray start`).

# %%
import time

import numpy as np

import amp_notebook as amp
from amp_notebook.bench.common import constant_dataset
from amp_notebook.bench.overhead import chain
from amp_notebook.bench.ray import digits_keys
from amp_notebook.runtime.backends import ray as amp_ray
from amp_notebook.ui import Dashboard

t0 = time.perf_counter()
amp_ray.connect(num_cpus=2)  # a local Ray: its own temp dir, no Ray dashboard
print(f"local Ray up in {time.perf_counter() - t0:.1f} s")

# %% [markdown]
# ## The MLP on threads and on Ray
#
# The paper's 4-layer MLP (784 hidden) on two workers, keys of 400 digits, the same settings on both
# backends. Each Ray run's clock starts once its actors are up (starting them takes seconds, reported
# separately). Two rounds each, interleaved (threads, Ray, Ray, threads), every round printed: thread
# timings on a shared machine drift.

# %%
mlp = amp.models.mlp(input_width=64, hidden=784)
data = digits_keys(batch=400, keys=24)
settings = dict(workers=2, mode="amp", max_active_keys=4, validate=False, placement="balanced", priority="fifo",
                optimizer={"name": "sgd", "lr": 0.01})

rounds = {"threads": [], "ray": []}
deploy_s = []
for backend in ("threads", "ray", "ray", "threads"):
    t0 = time.perf_counter()
    r = amp.train(mlp, data, backend=backend, **settings)
    rounds[backend].append(r)
    if backend == "ray":
        deploy_s.append(time.perf_counter() - t0 - r.wall_s)
on_threads, on_ray = rounds["threads"][0], rounds["ray"][0]
for backend, results in rounds.items():
    print(f"{backend:8s} {', '.join(f'{r.train_instances_per_s:6.0f}' for r in results)} instances/s")
ratio = np.median([r.train_instances_per_s for r in rounds["ray"]]) / np.median(
    [r.train_instances_per_s for r in rounds["threads"]])
print(f"ray / threads (medians): {ratio:.2f}; actors up in {', '.join(f'{d:.1f}' for d in deploy_s)} s")

# %% [markdown]
# Where did each worker run, and how well are the clocks aligned? The kernel pinged every actor a few
# times at start-up: it read its own clock before and after each ping and took the midpoint against the
# actor's clock. The best round trip bounds the error (`error_s`, half the round trip). On one machine the
# true offset is zero (all processes read the same monotonic clock), so `offset_s` shows the estimate's
# actual error; `drift_s` is how much the offset moved by the end of the run.

# %%
for w in on_ray.backend_stats["workers"]:
    print(f"worker {w['worker']} on {w['ip']} nodes {w['nodes']}: offset {w['offset_s'] * 1e6:+.0f} us "
          f"± {w['error_s'] * 1e6:.0f} us, drift {w['drift_s'] * 1e6:+.0f} us, {w['calls_sent']} calls for "
          f"{w['messages_sent']} messages")

# %%
Dashboard.compare(on_threads, on_ray, labels=("threads", "ray"), graph=mlp)

# %% [markdown]
# ## A replicated RNN, live
#
# The paper's list-reduction RNN with its step replicated twice (keys alternate between the replicas,
# which average their parameters at each epoch end: in the actors, while no message is in flight) on
# three Ray workers, in the background. The dashboard follows it live: pause, resume and the sliders reach
# the actors.

# %%
lists = amp.data.list_reduction_dataset(n_train=3000, n_val=300, seed=0)
rnn = amp.models.rnn(replicas=2)
run = amp.train(rnn, lists, backend="ray", background=True, workers=3, mode="amp", max_active_keys=4,
                min_update_frequency=5, epochs=2, optimizer={"name": "adam", "lr": 3e-3, "clip_norm": 5.0})
Dashboard(run)

# %%
result = run.wait()
print(f"{result.train_instances_per_s:.0f} lists/s, val accuracy per epoch {result.val_accuracy}, "
      f"staleness {result.staleness()['mean']:.2f} mean")  # two short epochs; `amp-notebook demo` goes to 97%

# %% [markdown]
# ## When does Ray pay off?
#
# A message's *work* grows with its size; a hop's *cost* hardly does. Measure the hop on a chain of
# no-op nodes alternating between two workers (every message crosses), on threads and on Ray:

# %%
noop = chain()


def per_message_us(backend: str, keys: int) -> float:
    r = amp.train(noop, constant_dataset(keys, 1), workers=2, max_active_keys=16, validate=False, dtype="float64",
                  backend=backend)
    return r.wall_s / int(r.trace.events()["messages"].sum()) * 1e6  # a bundle's row holds several messages


hop_threads_us, hop_ray_us = per_message_us("threads", 300), per_message_us("ray", 30)
print(f"per message: threads {hop_threads_us:.1f} us, ray {hop_ray_us:.0f} us")

# %% [markdown]
# The work a message carries: the threaded MLP run's trace gives the mean time a worker spent per
# message. Divide by the message's bytes (400 x 784 float32 activations) for the work per byte, and the
# **break-even size** is where a message's work costs as much as one hop: there a worker spends half its
# time on hops, so Ray keeps about half the threaded throughput; well above it the hop hardly matters.

# %%
ev = on_threads.trace.events()
handled = ev["phase"] < 2
work_s = float(np.sum(ev["end"][handled] - ev["start"][handled]) / np.sum(ev["messages"][handled]))
message_bytes = 400 * 784 * 4
seconds_per_byte = work_s / message_bytes
break_even = (hop_ray_us - hop_threads_us) * 1e-6 / seconds_per_byte
print(f"work per message {work_s * 1e3:.2f} ms for {message_bytes / 1e6:.2f} MB; "
      f"break-even message size ~ {break_even / 1e3:.0f} kB ({break_even / (784 * 4):.0f} rows of 784 floats)")

# %% [markdown]
# Compare your keys with it: here a key of 400 digits sends 1.25 MB between the MLP's layers; one tree
# per key (tutorial 04) sends a single row of a few dozen floats per message. `amp-notebook bench ray
# --json` measures the same figures more carefully (interleaved rounds, several key sizes).
#
# ## 4, 16 and 64 machines: ask the simulator
#
# One machine cannot show what 64 would do, but the simulator can, once it knows the costs. We calibrate
# it with what we just measured. The network is a pipeline of L = machines Linear layers (784 wide), one
# per machine, with as many keys in flight as machines:
#
# * a layer takes the time a 784 x 784 layer takes on this CPU for a key of B rows (forward; backward
#   twice that), measured once here;
# * every message between machines costs the machine that handles it one measured hop (Ray) or one
#   thread hand-off. Charging the whole measured hop as busy time is pessimistic: part of it is waiting,
#   which a full pipeline hides.
#
# We compare with one machine running every layer itself (no hops at all).

# %%
from threadpoolctl import threadpool_limits

rng = np.random.default_rng(0)
weights = rng.standard_normal((784, 784)).astype(np.float32)


def layer_seconds(rows: int, repeats: int = 7) -> float:
    """Median time of one layer's forward on one core (workers run BLAS on one thread each)."""
    x = rng.standard_normal((rows, 784)).astype(np.float32)
    times = []
    with threadpool_limits(limits=1, user_api="blas"):
        for _ in range(repeats):
            t0 = time.perf_counter()
            x @ weights
            times.append(time.perf_counter() - t0)
    return float(np.median(times))


def pipeline(layers: int) -> amp.Graph:
    g = amp.Graph(f"pipeline{layers}")
    h = g.input("x", width=8)
    for i in range(layers):
        h = g.linear(h, 8, name=f"layer{i}")
    g.softmax_cross_entropy(h, g.input("target", dtype="int"), name="loss")
    return g


def simulate(machines: int, fwd_s: float, hop_s: float) -> float:
    """Keys per second of the pipeline (the math runs on tiny payloads; time comes from the costs)."""
    nodes = {f"layer{i}": amp.NodeCost(fwd_s=fwd_s, bwd_s=2 * fwd_s, update_s=0.0) for i in range(machines)}
    costs = amp.CostModel(flops=1e15, message_overhead_s=hop_s, nodes=nodes)
    one = amp.data.Batch({"x": np.zeros((1, 8), np.float32), "target": np.zeros(1, np.int64)}, 1)
    keys = amp.data.Dataset("keys", [one] * (2 * machines), [])
    placement = {f"layer{i}": i for i in range(machines)} | {"x": 0, "target": machines - 1, "loss": machines - 1}
    run = amp.whatif(pipeline(machines), keys, devices=machines, costs=costs, max_active_keys=machines,
                     placement=placement, trace=False)
    return run.keys_per_s


table = {}
print(f"{'machines':>8} {'rows/key':>8} {'1 machine':>10} {'thread hops':>12} {'Ray hops':>10} {'Ray/threads':>11}")
for rows in (100, 1600):
    fwd_s = layer_seconds(rows)
    for machines in (4, 16, 64):
        alone = rows / (3 * fwd_s * machines)  # one machine runs all layers, forward and backward, no hops
        threads_like = simulate(machines, fwd_s, hop_threads_us * 1e-6) * rows
        on_ray = simulate(machines, fwd_s, hop_ray_us * 1e-6) * rows
        print(f"{machines:>8} {rows:>8} {alone:>8.0f}/s {threads_like:>10.0f}/s {on_ray:>8.0f}/s "
              f"{on_ray / threads_like:>11.2f}")
        table[rows, machines] = (alone, threads_like, on_ray / threads_like)

# %% [markdown]
# Read it row by row (the cell below asserts each statement). One machine slows down as the network
# deepens (it runs every layer); the pipeline keeps nearly the speed of one layer whatever its depth
# (within 20% from 4 machines to 64), so its gain over one machine grows with the number of machines. The
# Ray/threads column is the share of that pipeline that survives the hop: it hardly depends on the number
# of machines (within 0.05), since each machine pays one hop per message it handles, and it is at least
# as high for keys of 1600 rows as for 100, where the same hop is a larger part of a smaller stage. Real
# clusters add network transfer: `bandwidth=` and `latency=` in the cost model.

# %%
for rows in (100, 1600):
    alone, pipelined, share = ([table[rows, m][i] for m in (4, 16, 64)] for i in range(3))
    assert alone[0] > alone[1] > alone[2] and pipelined[2] > 0.8 * pipelined[0]
    gains = [p / a for p, a in zip(pipelined, alone, strict=True)]
    assert gains == sorted(gains) and max(share) - min(share) < 0.05
assert min(table[1600, m][2] for m in (4, 16, 64)) >= min(table[100, m][2] for m in (4, 16, 64))
#
# Finally, shut the local Ray down (a later `backend="ray"` run would start it again).

# %%
amp_ray.shutdown()
