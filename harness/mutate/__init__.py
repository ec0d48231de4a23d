"""Mutation testing of a listener's shutdown path against the scenario library: which one-line breaks it misses.

``mutator`` makes one-line breaks as source edits of listed functions; ``run`` runs the scenarios against
one mutant in a temporary copy of its package placed first on the run's PYTHONPATH (the fork server and
every process it forks import that copy); ``plan`` reads mutation/stop-path.txt, mutation/equivalent.yaml
and mutation/survivors.yaml and draws the sample; ``scopes`` declares what ``./dev mutate`` measures (the
reference's stop path, or with ``--engine`` the engine stand-in's: its list, its scenarios, its record);
``analysis`` scores a run; ``command`` is ``lastcall mutate`` and ``./dev mutate``; ``table`` renders
docs/mutation.md from docs/data/mutation.json.
Why not cosmic-ray or mutmut: docs/mutation.md.
"""
