"""Model compression of T/AI 115.1-2021 chapter 7 with the inverses of chapter 8 and the data generation of
chapter 9 that needs no training framework: pruning (§7.3, §8.3, §9.5; docs/pruning.md), structured matrices
(§7.4, §8.4, §9.6; docs/structured.md) and multi-model compression (§7.1, §8.1, §9.3; docs/multimodel.md:
``multi_model``, ``multi_model_onnx``).

``pruning``: masks, structured_sparse / Un_structured_sparse and their records; ``mask_generation``: magnitude,
ADMM group lasso and incremental regularisation as numpy on weight matrices; ``onnx_pruning``: filter pruning
applied to an ONNX model. ``circulant``: block-circulant weights with sign vectors; ``low_rank``: SVD and
block-term decompositions; ``structured_onnx``: both applied to an ONNX model. The package reads onnx and
numpy and imports only aipu.sim.machine and aipu.codec below it (floor 2 of docs/architecture.md).
"""
from aipu.compress.mask_generation import (admm_converged, admm_penalty_gradient, admm_update, averaged_ranks,
                                           column_ranks, group_norms, group_soft_threshold, magnitude_mask,
                                           offer_mask, reg_func, regularisation_gradient, row_mask, sparsity,
                                           update_regularisation)
from aipu.compress.onnx_pruning import LayerChange, PrunedModel, filter_masks, prunable_convs, prune_filters
from aipu.compress.pruning import (PMethod, PruneGranularity, StructuredSparsity, as_matrix, compact, from_matrix,
                                   masked, restore, structured_sparse, un_structured_sparse)
