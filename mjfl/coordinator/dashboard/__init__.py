"""The web dashboard: finished runs of output folders, read-only, in a browser (docs/dashboard.md).

- ``state``: pure functions from a run's records to the JSON shapes the page draws;
- ``catalog``: the runs of some output folders, read from their databases (read-only);
- ``server``: the aiohttp app (the page, ``/api/runs``, ``/api/runs/{id}``, the token rule)
  and ``serve``, which runs it until cancelled;
- ``static/``: the page itself, plain HTML, CSS and JavaScript.
"""
