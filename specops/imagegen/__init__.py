"""From a checkpoint directory to pictures (``specops generate``; docs/generate.md).

from specops.imagegen import generate_image
result = generate_image("ckpts/llamagen-b", class_id=[207], method="vvs", compare_ar=True)
result.images[0].save("fox.png"); print(result.table())
"""

from specops.imagegen.pipeline import (
    ARCHITECTURES,
    METHODS,
    ImageResult,
    Pipeline,
    generate_image,
    load_pipeline,
)

__all__ = ["generate_image", "load_pipeline", "ImageResult", "Pipeline", "ARCHITECTURES", "METHODS"]
