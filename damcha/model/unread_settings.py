"""Settings other Hugging Face architectures read that the project's model does not do otherwise: DamchaConfig
refuses them, and the app refuses a folder whose config sets one (damcha.runs.hf_folders), from this one table.
In the model layer so that a folder's bundled code (export-hf --with-code) carries it."""

from __future__ import annotations

# Given with a value other than what the model does, each is refused in words rather than stored and ignored
# (name -> (accepted?, what the model does)).
_ROPE_DEFAULT = (None, 10000, 10000.0)
UNREAD_SETTINGS = {
    "num_key_value_heads": (lambda c, v: v in (None, c.n_head),
                            "every registered mechanism has one key and value per head (no grouped-query attention)"),
    "head_dim": (lambda c, v: v in (None, c.n_embd // max(c.n_head, 1)), "heads are n_embd / n_head wide"),
    "tie_word_embeddings": (lambda c, v: not v, "the output head is its own matrix, not tied to the embedding"),
    "rope_theta": (lambda c, v: v in _ROPE_DEFAULT, "the llama layout rotates with the default RoPE (theta 10000)"),
    "rope_scaling": (lambda c, v: v is None, "the llama layout rotates with the default RoPE (no scaling)"),
    "rope_parameters": (lambda c, v: v is None or (v.get("rope_type", "default") == "default"
                                                  and v.get("rope_theta") in _ROPE_DEFAULT),
                        "the llama layout rotates with the default RoPE (theta 10000, no scaling)"),
    "sliding_window": (lambda c, v: v is None, "every layer attends to the whole (causal) context"),
}
