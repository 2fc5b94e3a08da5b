"""Lab 04, parameter servers: what its notebook measures and says, and its quiz.

- ``staleness``: whose pushes were how stale, and what the straggler did to the others;
- ``wallclock``: two parameter servers and a ring allreduce raced against the clock with one straggler;
- ``serverload``: a server's bytes per step counted and its busy time measured against its workers,
  and the exercise that counts them (:func:`~.serverload.check_server_load`);
- ``quiz``: the lab's questions.
"""
