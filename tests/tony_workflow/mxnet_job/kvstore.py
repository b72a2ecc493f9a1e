"""An MXNet parameter-server job: every worker pushes to a dist_sync key-value store and pulls the sum.

The scheduler, the server and the workers find each other through the DMLC_* variables the runtime
sets; each worker prints what it pulled.
"""
import os

import mxnet as mx

role = os.environ["DMLC_ROLE"]
kv = mx.kv.create("dist_sync")  # the scheduler and the servers serve here until the workers are done
if role == "worker":
    kv.init(7, mx.nd.zeros((3,)))
    kv.push(7, mx.nd.ones((3,)) * (kv.rank + 1))
    pulled = mx.nd.zeros((3,))
    kv.pull(7, out=pulled)
    print(f"[mxnet] worker {kv.rank} of {kv.num_workers} pulled {pulled.asnumpy().tolist()}", flush=True)
