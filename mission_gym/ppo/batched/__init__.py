"""A population's members of one network shape trained as one batched learner: the maths of a batched update
(:mod:`~mission_gym.ppo.batched.maths`) and the loop that runs SB3's ``learn`` for every member with one batched
rollout and one batched update per iteration (:mod:`~mission_gym.ppo.batched.learner`)."""
