"""Lab 05, scaling: what its notebook predicts and measures, and its quiz.

- ``predictions``: the cost model's predictions for machines nobody here runs, beside the published
  sweeps of those machines, and the ring-time exercise (:func:`~.predictions.check_ring_time`);
- ``simnodes``: two simulated nodes with a slowed link, flat ring against hierarchical, measured and
  predicted;
- ``datacenter``: ring, double binary tree and hierarchical allreduce from 8 to 100,000 GPUs on a
  published cluster design, where the ring's latency passes its bandwidth, and NCCL's choice at scale;
- ``quiz``: the lab's questions.
"""
