"""The run entry points of the library: one `run_*(config)` (or named entry point) per job, from one config
dataclass; the training runs nest the trainer's `TrainConfig` (`runners.options.RunOptions`).

- `runners.pretrain`: `run_pretraining(PretrainConfig)` (BERT / RoBERTa / ALBERT / ERNIE objectives),
  `run_pretrain_data` (the instance cache), `run_plot` (a run's curves);
- `runners.finetune`: `run_finetune(FinetuneRunConfig)`, `run_glue(GlueRunConfig)`, `run_evaluate(EvaluateConfig)`,
  `run_predict(PredictConfig)`, every task of the table;
  `runners.embed`: `run_embed(EmbedConfig)`;
- `runners.mrc`: `run_mrc_train` (`MRCTrainConfig`, around `tasks.mrc.train_mrc`) and the other `bertfam mrc`
  jobs (`run_mrc_predict`, `run_mrc_ensemble`, `run_mrc_evaluate`, `run_mrc_ask`, `run_mrc_compare`,
  `run_mrc_build_verifier`), one config dataclass each;
- `runners.distill`: `run_distill(DistillRunConfig)` (around `distill.pipeline.distill_general` / `distill_task`);
- `runners.multimodal`: `run_multimodal_pretrain`, `run_multimodal_finetune`, `run_multimodal_vocab`,
  `run_multimodal_eval`, `run_multimodal_convert` (around `bertfam.multimodal`);
- `runners.export`: `run_onnx_export` + `run_onnx_check` (`OnnxExportConfig`), `run_quantize` (`QuantizeConfig`);
- `runners.kbert`: `run_kbert_show`; `runners.core`: `describe_checkpoint`, `run_convert`, `run_vocab_train`;
  `runners.upgrade`: `run_upgrade(UpgradeConfig)` (files of older versions in the current format);
  `runners.demo`: `run_demo(DemoConfig)`.

The command modules (bertfam/commands/) only build these configs from the options (generated from the
configs' fields: `commands.flags`; or the trainer's alone: `commands.common.train_config`) and print what the
runners return.
"""
