"""Sharing a run beyond this machine: the Hugging Face Hub (:mod:`~mission_gym.sharing.hub`), a hyperparameter
search with Optuna (:mod:`~mission_gym.sharing.search`, its space in ``search_space.yaml``) and Weights & Biases
tracking (:mod:`~mission_gym.sharing.tracking`). Each needs an extra (``pip install 'mission_gym[hub]'``,
``[search]``, ``[track]``).
"""
