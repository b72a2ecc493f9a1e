"""The ApplicationMaster's program: one per job, in its own process (a container on YARN).

``supervisor`` starts it and replaces it when it dies or hangs (``attempts``: where a later
attempt resumes); ``master`` is the AM itself: sessions, the monitor, launching and killing, on the
state ``state`` declares; ``routes`` answer executors and clients over ``server`` (HTTP, tokens,
tracking pages from ``templates/``); ``policy`` holds TonY's failure rules, ``gang`` the account of
a gang being formed, ``liveness`` when a silent task is lost, ``store_watch`` the checkpoint store's
health, ``board`` the published status and its figures over time.

Nothing is imported here: each program imports the modules it uses.
"""
