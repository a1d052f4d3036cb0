import time, os
from amp_notebook.models import zoo
from amp_notebook.runtime.train import train
entry = zoo.get("tree-lstm")
data = entry.dataset("small", seed=0)
n = sum(b.size for b in data.train)
print(len(data.train), "keys", n, "instances")
for w in (1, 2, 1, 2, 1, 2):
    for mak in (16,):
        t = time.perf_counter()
        r = train(entry.graph(data), data, seed=0, workers=w, epochs=6, validate=False, max_active_keys=mak)
        dt = time.perf_counter() - t
        print(w, mak, r.engine, round(6*n/dt), "inst/s", round(dt,2), [round(u,2) for u in r.summary().get("utilization")], "load", os.getloadavg()[0], flush=True)
