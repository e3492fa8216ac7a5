"""Fleet benchmark: a night's dreaming for many namespaces, by one to three daemons.

An operator runs the secretary for many users, one namespace each, and needs every namespace
dreamed within a nightly window. Each configuration here is such a night:

  store    N namespaces (100, 1,000; 10,000 on request), each with a few hundred memories that
           count as maintained (every job's watermark past them) and 20 new conversation log
           lines (--lines, e.g. 20-50); PostgreSQL plus a Chroma server. Prepared once per size
           through the store's API and cached (a template database and a copy of the Chroma
           directory under --work); each night gets a copy (CREATE DATABASE ... TEMPLATE).
  daemons  1-3 `secretary run` processes, each with its own config and data directory, all on
           the one store, [jobs] concurrency 16, no schedule.
  night    one POST /v1/dream (every namespace with work), as an operator would ask; the request
           is cut into one unit per namespace that the daemons share; followed to its end.
  model    a scripted OpenAI-compatible server on 127.0.0.1:18501 answering every job with a
           valid reply built from the request (the extractor one memory per line, so the later
           jobs have work), after a set latency (1 s, 5 s), calls overlapping, with a
           requests-per-minute limit (429 with Retry-After above it).

Measured per configuration: wall time (POST to the request's end), LLM calls per second, the
most calls in flight at once (counted by the server), tokens, peak RSS of each daemon (VmHWM and
sampled VmRSS), units run twice and units lost (both must be 0), whether the configured
requests-per-minute limit was exceeded in any 60 s window (every arrival is logged), and with
one daemon SIGKILLed halfway, how soon after the kill another daemon finished its units (the
lease plus one minute at most). The issue's targets are judged across configurations. The
exit code is 1 if something that must never happen happened (a unit lost or run twice, the limit
exceeded, a night that did not end).

Ports 18500-18599: the model 18501, Chroma 18510 (preparing) and 18520 (a night), daemons from
18530. PostgreSQL on 127.0.0.1:5432 as user postgres (trust); databases fleet_tpl_* (prepared
stores, kept) and fleet_run_* (one per night, dropped after it unless --keep).

    python bench/fleet.py --list                        # the configurations
    python bench/fleet.py --quick                       # 20 namespaces, 0.2 s model: ~2 minutes
    python bench/fleet.py                               # what results/fleet.md shows (~2 hours)
    python bench/fleet.py --only n1000-d1-l1,n1000-d2-l1   # some configurations; results merge
    python bench/fleet.py --only n10000-d1-l1           # 10,000 namespaces (prepares ~1 hour)
    python bench/fleet.py --prepare-only                # build the stores, run no night

Preparing the 1,000-namespace store takes about 15 minutes (300,000 memories through the API at
~500/s on PostgreSQL, then their vectors); the 10,000 one (100 memories each) about an hour.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from fleet_bench.cli import main

if __name__ == "__main__":
    sys.exit(main(description=__doc__))
