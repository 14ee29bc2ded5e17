"""torch.fx plumbing shared by the graph-rewriting passes, one module a job: `tracing`
(trace a Program with shapes, float attributes kept symbolic), `ops` (one name and one
argument layout per op, whatever its spelling), `effects` (in-place writes, aliasing, dead
code), `graph_edit` (insert and redirect nodes) and `codegen` (emit the rewritten graph as a
standalone ModelNew module a later pass can trace again)."""
