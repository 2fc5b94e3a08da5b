"""Print what rl.topology.discover() finds on the stand-in's machine, as JSON (one process, no MPI)."""
import json

import ringlab as rl

topology, facts = rl.topology.discover()
print(json.dumps({"facts": facts, "bandwidth": topology.bandwidth_matrix().tolist(),
                  "name": topology.name}, default=str))
