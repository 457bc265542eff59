"""The pipeline: profile + facts → plan (:mod:`.core`, :mod:`.projection`, :mod:`.scope`) → apply
(one executor, deferred :mod:`.signals`) → verify → record; plans and results are :mod:`.plan`'s
records, and :mod:`.review` plans offline against saved facts."""
