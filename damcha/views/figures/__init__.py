"""Pure figure functions: arrays in, plotly Figure out, one module for each kind of thing drawn. The app, the
export CLI and the tests share them, through this package's names."""

from damcha.views.figures.curves import (
    BASELINE_LINES,
    LOG_AXIS_SPREAD,
    PROFILE_LINES,
    curve_figure,
    highlighted_text_html,
    paired_scatter_figure,
    profile_figure,
    projection_figure,
    share_bar_range,
    spectrum_figure,
    statistic_curves_figure,
    token_attribution_figure,
    token_loss_figure,
    training_curves_figure,
)
from damcha.views.figures.display import (
    MAX_DISPLAY_CELLS,
    SMALL_PANEL_CELLS,
    block_means,
    display_copy,
    pooling_factors,
)
from damcha.views.figures.evidence import interval_cell, interval_figure
from damcha.views.figures.heads import (
    ATTENTION_PANELS_PER_ROW,
    attention_figure,
    head_by_head_figure,
    head_metrics_figure,
    named_bars_figure,
)
from damcha.views.figures.images import (
    digit_attribution_figure,
    digit_figure,
    grid_maps_figure,
    image_row_figure,
    probabilities_figure,
    rgb_image_figure,
)
from damcha.views.figures.matrices import (
    contour_figure,
    epoch_animation_figure,
    labelled_matrix_figure,
    matrix_figure,
    metric_heatmap_figure,
    metric_panels_figure,
    small_multiples_figure,
    surface_figure,
)
from damcha.views.figures.style import (
    DIVERGING,
    GREYS,
    INTERPOLATION_NOTE,
    LOG_AXIS,
    SEQUENTIAL,
    MatrixStyle,
    as_style,
    colour_bar,
    colour_scale,
    grid_shapes,
    interpolation_noted,
    matrix_trace,
    squarish,
    style_axes,
    symmetric_limit,
)

__all__ = [
    "ATTENTION_PANELS_PER_ROW", "BASELINE_LINES", "DIVERGING", "GREYS", "INTERPOLATION_NOTE", "LOG_AXIS",
    "LOG_AXIS_SPREAD", "MAX_DISPLAY_CELLS", "MatrixStyle", "PROFILE_LINES", "SEQUENTIAL", "SMALL_PANEL_CELLS",
    "as_style", "attention_figure", "block_means", "colour_bar", "colour_scale", "contour_figure",
    "curve_figure", "digit_attribution_figure", "digit_figure", "display_copy", "epoch_animation_figure",
    "grid_maps_figure", "grid_shapes", "head_by_head_figure", "head_metrics_figure", "highlighted_text_html",
    "image_row_figure", "interpolation_noted", "interval_cell", "interval_figure", "labelled_matrix_figure",
    "matrix_figure", "matrix_trace", "metric_heatmap_figure", "metric_panels_figure", "named_bars_figure",
    "paired_scatter_figure", "pooling_factors", "probabilities_figure", "profile_figure", "projection_figure",
    "rgb_image_figure", "share_bar_range", "small_multiples_figure", "spectrum_figure", "squarish",
    "statistic_curves_figure", "style_axes", "surface_figure", "symmetric_limit", "token_attribution_figure",
    "token_loss_figure", "training_curves_figure",
]
