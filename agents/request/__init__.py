"""One typed request per thing the agents do, and the one place their defaults live.

- settings.py: the groups of an `OptimizeRequest` (search, budget, evaluation, llm, memory);
- requests.py: `OptimizeRequest`, `EvaluateRequest`, `ProfileRequest`;
- target.py: `Target`, what is optimised (agents/targets/load.py finds it in a file);
- table.py: every setting's field path, CLI flag, editor key and config key;
- defaults.py: every default (search shapes, timing budgets, devices);
- wire.py: requests to JSON and back, checked, for the worker process;
- run.py: `optimize(request, on_event, cancel) -> SearchResult`, the one way to search.

Nothing is imported here, so importing one module of the package (the defaults, from the
verifier) never pulls in the search that run.py needs.
"""
