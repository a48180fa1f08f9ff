"""``driftbus plan``: what a publish would do, and why, without writing anything.

- ``command`` — the command: its flags and the connections it opens.
- ``explain`` — the plan itself.
- ``render`` — the plan for machines and pull requests (pure).
"""
