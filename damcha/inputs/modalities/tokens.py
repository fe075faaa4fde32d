"""Token ids without a tokenizer here (imported subword models): typed as numbers, labelled as numbers."""

from damcha.inputs.modalities.base import Modality

MODALITY = Modality("tokens", "token ids", "ids")
