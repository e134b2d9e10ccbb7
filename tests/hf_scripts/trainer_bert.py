"""An ordinary Hugging Face Trainer script (it never names lazyxla or torch_xla).

    python trainer_bert.py STEPS [--cpu] [--base] [--eval]

Fine-tunes a tiny random-init BERT sequence classifier (BERT-base's shape with `--base`,
sequences of 128 tokens) on synthetic tokens, logging every 5 steps, and prints the logged
losses as `LOSSES [...]` and the model's device as `DEVICE ...`. `--eval`: as a fine-tune
with an evaluation set is usually written: two micro-batches a step, a warmup then a cosine
schedule, and every 6 steps an evaluation over 20 examples in batches of 8 (the last one of
4) with an accuracy metric; its loss and accuracy follow each evaluation's step in LOSSES.
"""
import json
import sys

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments

steps = int(sys.argv[1])
flags = sys.argv[2:]
torch.manual_seed(0)
# No dropout: the lazy device draws its own random streams, so runs with dropout differ.
if "--base" in flags:   # BertConfig's defaults are BERT-base's
    config, seq = BertConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=2), 128
else:
    config, seq = BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                             intermediate_size=256, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                             num_labels=2), 64
model = BertForSequenceClassification(config)


class Sentences(torch.utils.data.Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        ids = torch.randint(0, config.vocab_size, (seq,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "attention_mask": torch.ones(seq, dtype=torch.long), "labels": torch.tensor(i % 2)}


losses = []


class KeepLosses(TrainerCallback):
    def on_log(self, args, state, control, logs=None, **kwargs):
        for key in ("loss", "eval_loss", "eval_accuracy"):
            if logs and key in logs:
                losses.append(logs[key])


def accuracy(prediction) -> dict:
    return {"accuracy": float((prediction.predictions.argmax(-1) == prediction.label_ids).mean())}


evaluation = {}
if "--eval" in flags:
    evaluation = dict(gradient_accumulation_steps=2, lr_scheduler_type="cosine", warmup_steps=3,
                      eval_strategy="steps", eval_steps=6, per_device_eval_batch_size=8)
args = TrainingArguments(output_dir="trainer-out", max_steps=steps, per_device_train_batch_size=8,
                         logging_steps=5, report_to=[], save_strategy="no", learning_rate=1e-4, seed=0,
                         disable_tqdm=True, use_cpu="--cpu" in flags, **evaluation)
held_out = torch.utils.data.Subset(Sentences(), range(4076, 4096)) if evaluation else None
Trainer(model=model, args=args, train_dataset=Sentences(), eval_dataset=held_out, callbacks=[KeepLosses()],
        compute_metrics=accuracy if evaluation else None).train()
print("DEVICE", next(model.parameters()).device)
print("LOSSES", json.dumps(losses))
