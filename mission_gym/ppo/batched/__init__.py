"""A population's members of one network shape trained as one batched learner.

A population's members are independent PPO runs (their own seed, hyperparameters, schedules, optimizer state,
minibatch order, envs, VecNormalize statistics, callbacks and run directory), but each is too small to keep a GPU
or even a CPU core's vector units busy: most of a member's update is per-operation overhead around matrix products
of 128 columns. :class:`BatchedLearner` keeps every member an ordinary :class:`~mission_gym.ppo.lean.LeanPPO` model
(what it saves, logs and loads is unchanged) and computes their work together:

- the members' weights are stacked along a leading member axis (:class:`StackedPolicies`), so one rollout step is
  one batched forward pass for all members and one minibatch step is one batched forward, backward, gradient clip
  and Adam step (:func:`torch.baddbmm` over the member axis), each member with its own learning rate, clip range,
  coefficients and Adam moments;
- each member keeps its own random streams: its minibatch order comes from a NumPy generator and its actions from
  a torch generator, both in the state a lone run's global generators would be in, so on the CPU a member trained
  in the batch follows the same member trained alone to within float rounding (``tests/test_batched.py``);
- after each update the stacked weights and Adam moments are copied back into every member's own policy and
  optimizer, so checkpoints, evaluations and ``PPO.load`` see an ordinary model.

Members must share what shapes the arrays: the env's spaces, ``n_envs``, ``n_steps``, ``batch_size``,
``n_epochs``, the network and whether ``clip_range_vf`` is set (:func:`batch_key`). Covered policies are SB3's
actor-critic MLPs over equal categorical heads (Mission Gym), one categorical (``Discrete``) or a diagonal
Gaussian; :func:`batchable` says why another is not.

The package, one idea per module: the stacked policies (:mod:`~mission_gym.ppo.batched.stack`), the update
(:mod:`~mission_gym.ppo.batched.update`), the rollout's storage and forward pass (:mod:`~mission_gym.ppo.batched.rollout`)
and the loop that runs SB3's ``learn`` for every member (:mod:`~mission_gym.ppo.batched.learner`).
"""
