"""UTF-8 bytes, one token each."""

from __future__ import annotations

from dataclasses import dataclass

from damcha.inputs.modalities.base import Modality


def printable(byte: int) -> str:
    """A byte as one visible character (⏎ newline, ⇥ tab, ␣ space, \\xNN otherwise unprintable)."""
    ch = chr(int(byte))
    return {"\n": "⏎", "\t": "⇥", " ": "␣"}.get(ch, ch if 32 <= int(byte) < 127 else f"\\x{int(byte):02x}")


@dataclass(frozen=True)
class ByteText(Modality):
    def token_text(self, token):
        return printable(token)

    def token_labels(self, tokens):
        return [printable(t) for t in tokens]

    def validation_fields(self, tokens, targets, label, index, dataset, task):
        text = bytes(tokens.astype("uint8")).decode("utf-8", "replace")
        return dict(targets=targets.copy(), source=f"validation window {index}", text=text, validation_index=index)


MODALITY = ByteText(
    "byte_text", "UTF-8 bytes", "text", unit="char", shown_unit="byte",
    prediction="next_token_distribution", prediction_title="Most likely next bytes",
    completion="continuation",
    blank_token=ord(" "), blank_description="every character a space")
