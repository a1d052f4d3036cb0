from amp_notebook.models import zoo
from amp_notebook.runtime.train import train
entry = zoo.get("tree-lstm")
data = entry.dataset("small", seed=0)
r = train(entry.graph(data), data, seed=0, workers=2, epochs=12, validate=False, max_active_keys=16)
