"""``driftbus up`` / ``down``: the whole thing, locally.

- ``command`` — the command: flags, start, wait, stop.
- ``clusters`` — which clusters, started how, served by which processes.
- ``info`` — how a running stack is found and describes itself.
- ``detach`` — ``up --detach`` and ``down``: the stack in the background.
- ``localbus`` — the closed bus of ``up``: users, certificates, the server configuration.
- ``example`` — what ``up`` does on its bus as the operator: the example policy and bundle.
"""
