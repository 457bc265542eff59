"""The pipeline: profile + facts → plan (:mod:`.core`'s ``make_plan``, over the projection of
:mod:`nodeagent.kinds.projection`, narrowed by :mod:`.scope`) → apply (one executor, signals deferred by
:mod:`.signals`) → verify → record. Plans and results are :mod:`nodeagent.plan`'s records; :mod:`.review` plans
offline against saved facts."""
