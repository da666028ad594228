"""The web dashboard: finished runs of output folders, read-only, in a browser (docs/dashboard.md).

- ``state``: pure functions from a run's records to the JSON shapes the page draws;
- ``catalog``: the runs of some output folders, read from their databases (read-only);
- ``live``: the run going on, kept in the same shapes from its events;
- ``sources``: where the API's answers about one run come from (the live run or a finished one);
- ``server``: the aiohttp app (the page, ``/api/runs``, ``/api/runs/{id}``, ``/api/live``, the token rule),
  ``serve``, which runs it until cancelled, and ``live_dashboard`` beside a run;
- ``static/``: the page itself, plain HTML, CSS and JavaScript.
"""
