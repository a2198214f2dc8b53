"""The run entry points of the library: each builds a model, its data and one `training.Trainer` from one
run config that nests the trainer's `TrainConfig` (`runners.options.RunOptions`).

- `runners.pretrain`: `run_pretraining(PretrainConfig)` (BERT / RoBERTa / ALBERT / ERNIE objectives);
- `runners.finetune`: `finetune`, `evaluate`, `predict`, `run_glue` (`FinetuneOptions`), every task of the table;
- `runners.mrc`: `run_mrc_train` (`MRCTrainConfig`, around `tasks.mrc.train_mrc`) and the other `bertfam mrc`
  jobs (`run_mrc_predict`, `run_mrc_ensemble`, `run_mrc_evaluate`, `run_mrc_ask`, `run_mrc_compare`,
  `run_mrc_build_verifier`), one config dataclass each.

The other training entry points stay beside the code they train and take a `TrainConfig` the same way:
`distill.pipeline.distill_general` / `distill_task`,
`multimodal.pretrain.pretrain_multimodal` / `multimodal.finetune.finetune_multimodal`. The command modules
(bertfam/commands/) build every one of them from the options (`commands.common.train_config`).
"""
