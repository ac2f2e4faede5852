"""The shared core: the vocabulary the worker, the agent, the entrypoint and the reader all speak.

Each of them names workers, classifies failures and orders them. If each side kept its own copy of
a rule, a pod and the reader could name different root causes. So every such rule has exactly one
home here, one module per rule. The core is pure Python: stdlib and protobuf, no flytekit, no torch,
no I/O. It ships alone as ``rootcause-core``, so a backend service gets it without the plugin, and a
Flyte 2 install without any Flyte 1 package. ``docs/messages.md`` lists the modules and what each owns.
"""
