"""Patch vectors read in place: position t reads patch t and reconstructs it (the reference code's
causal masked-row reconstruction, here without masking: what its trained model computes on a whole
image). No free-running completion applies."""

from __future__ import annotations

from dataclasses import dataclass

from damcha.inputs.modalities.image_patches import GRID, ImagePatches, _patch


@dataclass(frozen=True)
class PatchesInPlace(ImagePatches):
    def token_labels(self, tokens):
        return [_patch(i) for i in range(len(tokens))]

    def patch_sequences(self, patches):
        return patches, patches


MODALITY = PatchesInPlace(
    "patches_in_place", "32x32 colour image as 8x8 patches of 4x4x3, each read in place "
    "(the reference code's reconstruction task)", "photo", GRID, unit="patch",
    picture="rgb", picture_caption="What the model sees (32x32, 8x8 patches)",
    prediction="image_from_patches", prediction_title="Reconstruction in place (causal)",
    prediction_caption="reconstructed, each patch from itself and the ones before it",
    blank_description="a black image (every patch zero)")
