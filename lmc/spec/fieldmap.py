"""Where each `train:` field takes effect — the audit table of the recipe (beside config.py).

Every TrainConfig field is in WHERE with the stage that reads it.  A field whose entry starts
with "refused" is refused by `lmc train` with exit 2 whenever set (not implemented yet); one
that says "refused without/on/with …" is refused where it cannot apply (a YOLO knob on a
classifier); every other field changes what training does.  tests/test_recipe_audit.py
walks every field on a small spec and checks the table against what actually happens: the
field is refused naming itself, or the trained state (parameters, optimizer state, averages,
BN statistics) differs from a run without it, or — for the eval- and cadence-only fields — the
records it governs change.  No field is accepted and ignored.
"""
from __future__ import annotations

from lmc.optim import declared_fields

WHERE: dict[str, str] = {
    # the schedule and the update (lower.hyperparams, optim/*, schedule.py)
    "learning_rate": "hp vector: the lr of every step (schedule.learning_rate)",
    "batch_size": "the module's static batch; the batcher",
    "epochs": "the schedule's length and the loop's",
    "seed": "init draws, data order, augmentation and mixing draws",
    "momentum": "optimizer hp (sgd momentum; rmsprop's μ); refused for optimizers that do not read it",
    "use_adam": "optimizer selection (optim.selection)",
    "optimizer": "optimizer selection (optim.selection)",
    "use_muon": "optimizer selection: Muon for 2-D dense weights",
    "use_shampoo": "optimizer selection: Shampoo for square dense weights",
    "rmsprop_decay": "rmsprop hp ρ; refused with other optimizers",
    "rmsprop_eps": "rmsprop hp ε; refused with other optimizers",
    "weight_decay": "hp vector: decoupled weight decay in every optimizer template",
    "cosine_decay": "schedule.learning_rate",
    "warmup_epochs": "schedule.learning_rate",
    "exp_lr_decay_rate": "schedule.learning_rate",
    "exp_lr_decay_epochs": "schedule.learning_rate (under exp_lr_decay_rate)",
    "wd_exclude_norm_bias": "Abi.decay: rank < 2 tensors and positional embeddings (Param.role) take no decay",
    "grad_accum_steps": "@grad_step/@apply_step: k micro-batches per update",
    "grad_clip_norm": "templates/optim/grad_clip: global-norm clipping in the graph",
    "head_lr_mult": "hp vector: the final dense head's lr multiplier",
    "bn_momentum": "hp vector: the BN running statistics' weight on the old value",
    "use_ema": "the EMA region on the device (templates/optim/ema)",
    "ema_decay": "hp vector (under use_ema)",
    "use_swa": "the SWA region, snapshots at epoch ends from swa_start_epoch",
    "swa_start_epoch": "the first SWA snapshot (under use_swa)",
    "use_swag": "SWAG deviations region and the sampled eval (under use_swa)",
    "swag_k": "SWAG's deviation count (under use_swag)",
    "swag_samples": "SWAG's eval samples (under use_swag)",
    "spectral_cap": "@spectral_project after every spectral_every steps",
    "spectral_every": "@spectral_project cadence (under spectral_cap)",
    "fp8": "E4M3 projection of weights and input around the step (trust/fp8)",
    "sync_bn": "refused: data-parallel BN statistics over all ranks would need a collective inside the compiled step",
    # the loss (losses/*, config.effective_loss)
    "label_smoothing": "the loss's targets",
    "loss_kind": "the loss module (losses/*)",
    "use_focal": "the integer-label CE's focal modifier (and YOLO objectness)",
    "focal_gamma": "hp vector: the focal exponent (under use_focal; the YOLO anchor/FPN objectness)",
    "use_yolov1": "the YOLOv1 loss; refused on nets without a detection head",
    "use_diou_box": "YOLO loss: DIoU box term; refused without the YOLO loss",
    "anchors": "YOLO loss: anchor path; refused without the YOLO loss",
    "fpn_scales": "YOLO loss: multi-scale path; refused without fpn_detect",
    "yolo_cls_weights": "YOLO loss, anchor path: class weights; refused elsewhere",
    "yolo_cls_focal_gamma": "YOLO loss, anchor/FPN paths: class focal (1 − p_t)^γ; refused elsewhere",
    # the data (data/batcher.py, mix.py, policy.py)
    "augment": "batcher: pad-crop (or random crop) + horizontal flip; masks: paired flip; boxes: HSV jitter + flip with the boxes",
    "random_erasing": "batcher: random erasing",
    "random_erasing_prob": "batcher (under random_erasing)",
    "use_mixup": "batcher: mixup of images and soft targets (data/mix.py)",
    "mixup_alpha": "mix.Mixer (under use_mixup)",
    "use_cutmix": "batcher: cutmix (data/mix.py)",
    "cutmix_alpha": "mix.Mixer (under use_cutmix)",
    "use_knn_mixup": "batcher: KNN-mixup (data/mix.py)",
    "knn_mixup_alpha": "mix.Mixer (under use_knn_mixup)",
    "use_rand_augment": "batcher: RandAugment (data/policy.py)",
    "rand_augment_n": "policy.Policy (under use_rand_augment)",
    "rand_augment_m": "policy.Policy (under use_rand_augment)",
    "rand_augment_geometric": "policy.Policy: timm's geometric sampler (under use_rand_augment)",
    "rand_augment_mstd": "policy.Policy (under rand_augment_geometric)",
    "rand_augment_inc": "policy.Policy (under rand_augment_geometric)",
    "use_auto_augment": "batcher: AutoAugment (data/policy.py)",
    "repeated_aug": "batcher.order: repeated augmentation",
    "gaussian_noise_sigma": "batcher: N(0, σ²) added to every training batch",
    "fpn_affine_scale": "batcher (data/boxes.BoxAffine): the FPN path's box-aware scale gain; refused without fpn_affine_prob",
    "fpn_affine_translate": "batcher (data/boxes.BoxAffine): the box-aware shift; refused without fpn_affine_prob",
    "fpn_affine_prob": "batcher (data/boxes.BoxAffine): per-image chance of the affine; refused without fpn_scales",
    "fpn_affine_wh_thr_px": "data/boxes.BoxAffine: drops transformed boxes under this side; refused without fpn_affine_prob",
    "fpn_affine_area_thr": "data/boxes.BoxAffine: drops boxes keeping less area; refused without fpn_affine_prob",
    "train_res": "the train step's input resolution (infer.train_net, data/resolution.py); refused on a net "
                 "whose weights depend on it (flatten → dense) or whose labels are not one class per image",
    "test_crop_ratio": "eval: the validation images resized and centre-cropped (data/resolution.py); refused "
                       "without image inputs and a class per image",
    "dropout": "a keep mask on the final dense layer's input, drawn by the host (lmc/train/masks.py); refused on "
               "a net not ending in dense",
    "drop_path": "per-example keep masks on every residual branch, rate ramped over the sites (lmc/train/masks.py); "
                 "refused on a net without residual sites",
    # init (init.py, checkpoint.py)
    "head_prior_bias": "init: the head bias := log π",
    "det_prior_pi": "init (init.apply_det_prior): fpn_detect's objectness biases −log((1−π)/π); refused without fpn_detect",
    "vit_init": "init: ViT's rules for linears and the patch embedding",
    "cnx_init": "init: ConvNeXt's rules for convs and linears",
    "bootstrap_backbone": "init: the leading parameters (a layer prefix of that many floats) by tensor name from an lmc "
                          "checkpoint, .npz/.safetensors or run directory, with their layers' BN statistics; or a flat "
                          ".bin of exactly the prefix",
    "bootstrap_backbone_range": "init: a window of the flat parameter vector from a .bin",
    # precision
    "bf16": "matmul operands in bfloat16 (dense, linear, attention); refused where no primitive has a bf16 form",
    "bf16_conv": "the standard convs' matmul operands in bfloat16 too (templates/prims/conv.mlir.j2)",
    # eval and cadence (train.py, evaluate.py)
    "eval_every_n_epochs": "cadence: the eval records",
    "checkpoint_every_n_epochs": "cadence: the checkpoint records and the numbered snapshots RUN/epoch-N.npz",
    "keep_best": "callbacks.KeepBest: the k best checkpoints by a validation metric (RUN/best.npz); "
                 "refused without evals or with a metric the evals do not report",
    "early_stop": "callbacks.EarlyStop: the run stops after `patience` evals without improvement; "
                  "refused without evals or with a metric the evals do not report",
    "val_every_epochs": "cadence on dataset imagenet (the Lean kit's ImageNet-streaming main): the eval records; "
                        "refused on other datasets and beside eval_every_n_epochs",
    "use_tta": "eval: logits averaged over augmented views (data.TTA); refused without augmentation",
    "tta_samples": "eval: the number of TTA views (under use_tta)",
    "running_bn": "eval: @forward's BN normalises with the running statistics (true) or with each eval "
                  "batch's own statistics (false, the Lean kit's default; lower.eval_batch_stats); the "
                  "train step keeps the running statistics either way",
}

# the fields registry entries declare say themselves where they act (core.fields.RecipeField)
WHERE.update({f.name: f.where for f in declared_fields()})
