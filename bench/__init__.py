"""`make bench`: lockgate's performance figures beside a bare aiohttp echo server.

    core.py          the scenarios and the table (`python -m bench.core [--scale 0.1]`)
    procs.py         starting and stopping `lockgate dev` and the floor; /proc readings
    load.py          the load generator: one keep-alive aiohttp session
    measure.py       /health, CPU time per operation, Redis memory and RSS
    report.py        the table and the machine line
    floor.py         the HTTP floor: one POST route that returns its JSON body
    noop_handler.py  the worker: records each job id it runs, returns at once
    celery_peer.py   Celery + Redis beside lockgate, same loads, and the side-by-side
                     harness's verdict line (Celery in the bench venv: `make bench-venv`)
    celery_side.py   Celery's client side, run by the bench venv's interpreter
    celery_app.py    the Celery peer's app and no-op task, which records ids the same way

Under the table, "CPU us per ..." lines split each operation's CPU time between the
gateway, Redis, the workers and the load generator, and say how busy other processes
kept the machine meanwhile: above 10%, the figures above are low and worth a rerun.
"""
