"""One lock for every Hugging Face model load or build in the process.

transformers (5.x) loads a model by patching process-wide state while ``from_pretrained``
runs: ``PreTrainedModel.tie_weights`` becomes a no-op, ``torch.nn.init``'s functions and
``torch.linspace`` are replaced, the model is built on the meta device. None of that is per
thread. A worker runs activities in a thread pool, so a second model loaded or built meanwhile
(the embedding model for a bandit's context while a fine-tune trains, the local provider's
model while verification runs) came out wrong: its tied output layer never tied, left on the
meta device, and ``model.to(device)`` failed with "Cannot copy out of meta tensor". Every load
and build of a transformers model in Armature holds :data:`LOAD_LOCK`.
"""

from __future__ import annotations

import threading

__all__ = ["LOAD_LOCK"]

#: Held around ``from_pretrained`` and model construction (re-entrant: a load may build).
LOAD_LOCK = threading.RLock()
