"""The eager port's PPO step (eager_port.py's `ppo-step` and `phases` commands) on the decoder of eager_model.py:
the reverse task's prompts and reward, left padding, response log-probs and values, masked whitening, GAE, the
dual-clip policy loss and low-variance KL, AdamW and grad-norm clipping, the critic and actor updates, cmd_ppo_step,
and cmd_phases with its batch file (load_batch)."""
import json
import math
import statistics
import sys
import time

import torch

from eager_model import ATTN, BOS, EOS, PAD, SHAPES, VERSION, VOCAB, Model, blas, causal_bias, generate, \
    positions_of

FUSED_ADAMW = VERSION >= (2, 4)  # AdamW(fused=True) on the CPU; before, the default for-loop (foreach is slower on CPU)
CLIP_FOREACH = "foreach" in torch.nn.utils.clip_grad_norm_.__code__.co_varnames  # torch >= 2.0


def char_id(c):
    return 4 + ord(c) - 32


def response_text(ids):
    out = []
    for i in ids:
        if i in (PAD, EOS):
            break
        out.append("\n" if i == 3 else chr(32 + i - 4) if 4 <= i < VOCAB else "?")
    return "".join(out)


def reverse_score(response, target):
    """The reverse task's reward (tasks/task.cpp): right digits in the right places, right length, digits at all."""
    given = response.rstrip()
    denom = max(len(target), len(given))
    if denom == 0:
        return 1.0
    matches = sum(x == y for x, y in zip(target, given))
    digits = sum(c.isdigit() for c in given)
    return (0.6 * matches / denom + 0.2 * (1 - abs(len(given) - len(target)) / denom)
            + (0.2 * digits / len(given) if given else 0.0))


def left_pad(rows):
    """Rows of ids -> ids, mask [B, P] left-padded to the longest row (ppo.cpp's prompt width)."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), PAD, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r)
        mask[i, width - len(r):] = 1
    return ids, mask


def response_log_probs(model, ids, mask, positions, r, with_entropy=False):
    """Log-probs of the last r tokens (a forward of the whole sequence; logits of the r predicting positions only),
    and their entropy when asked (a metric: no gradient)."""
    t = ids.shape[1]
    logits = model.logits(model.hidden(ids, positions, causal_bias(mask, t))[:, t - r - 1:t - 1]).float()
    lse = torch.logsumexp(logits, dim=-1)
    lp = logits.gather(-1, ids[:, t - r:, None]).squeeze(-1) - lse
    if not with_entropy:
        return lp, None
    with torch.no_grad():
        x = logits.detach()
        return lp, lse.detach() - (torch.softmax(x, -1) * x).sum(-1)


def response_values(critic, ids, mask, positions, r, response_mask):
    """veRL / ppo.cpp: the value of the state before each response token."""
    t = ids.shape[1]
    hidden = critic.hidden(ids, positions, causal_bias(mask, t))[:, t - r - 1:t - 1]
    return critic.value(hidden).squeeze(-1).float() * response_mask


def masked_mean(x, mask):
    return (x * mask).sum() / mask.sum().clamp_min(1e-8)


def whiten(x, mask):
    """rl/algorithms.cpp masked_whiten: float64 sums, unbiased variance."""
    x64, m64 = x.double(), mask.double()
    total, sq, n = torch.stack(((x64 * m64).sum(), (x64 * x64 * m64).sum(), m64.sum())).tolist()
    mean = total / n
    var = max(0.0, (sq - n * mean * mean) / (n - 1))
    return (x - mean) * (1.0 / math.sqrt(var + 1e-8))


def gae(rewards, values, mask, gamma, lam):
    """rl/advantages.cpp compute_gae (veRL): reverse scan, masked positions carry the state; advantages whitened."""
    on = mask > 0
    next_values = torch.zeros(values.shape[0])
    last = torch.zeros(values.shape[0])
    columns = []
    for t in reversed(range(values.shape[1])):
        v = values[:, t]
        delta = rewards[:, t] + gamma * next_values - v
        last_t = delta + gamma * lam * last
        next_values = torch.where(on[:, t], v, next_values)
        last = torch.where(on[:, t], last_t, last)
        columns.append(last)
    advantages = torch.stack(columns[::-1], 1)
    return whiten(advantages, mask), advantages + values


def policy_loss(old, lp, adv, mask, denominator, clip_low, clip_high, clip_c):
    """rl/losses.cpp policy_loss (veRL's dual-clip PPO), token-mean over `denominator` tokens."""
    neg_kl = (lp - old).clamp(-20.0, 20.0)
    ratio = neg_kl.exp()
    ppo_kl = masked_mean(-neg_kl.detach(), mask)
    loss1 = -adv * ratio
    loss2 = -adv * ratio.clamp(1 - clip_low, 1 + clip_high)
    clipped1 = torch.maximum(loss1, loss2)
    clipfrac = masked_mean((loss2 > loss1).float(), mask)
    loss3 = -adv * clip_c
    clipped2 = torch.minimum(loss3, clipped1)
    negative = adv < 0
    clipfrac_lower = masked_mean(((clipped1 > loss3) & negative).float(), mask)
    losses = torch.where(negative, clipped2, clipped1)
    return (losses * mask).sum() / denominator, clipfrac, clipfrac_lower, ppo_kl


def low_var_kl(lp, ref):
    kl = (ref - lp).clamp(-20.0, 20.0)
    return (kl.exp() - kl - 1).clamp(-10.0, 10.0)


def optimizer(params, lr):
    extra = {"fused": True} if FUSED_ADAMW else {}
    return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, **extra)


def clip_(model, max_norm):
    extra = {"foreach": True} if CLIP_FOREACH else {}
    return float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm, **extra))  # one host read, as ppo.cpp


class Batch:
    """A PPO batch as the trainer holds it: ids and mask [B, P + R] (prompts left-padded, responses right-padded),
    position ids from the mask, and the response mask [B, R] (float)."""

    def __init__(self, ids, mask, response_mask):
        self.ids, self.mask, self.response_mask = ids, mask, response_mask
        self.positions = positions_of(mask)
        self.rows, self.r = response_mask.shape

    def micro(self, size):
        return [slice(i, i + size) for i in range(0, self.rows, size)]


def infer_log_probs(model, b, micro):
    """Response log-probs [B, R] under inference_mode, micro-batches of `micro` rows (old and reference log-probs)."""
    model.eval()
    with torch.inference_mode():
        return torch.cat([response_log_probs(model, b.ids[c], b.mask[c], b.positions[c], b.r)[0]
                          for c in b.micro(micro)]).clone()


def infer_values(critic, b, micro):
    """Critic values [B, R] under inference_mode, micro-batches of `micro` rows."""
    critic.eval()
    with torch.inference_mode():
        return torch.cat([response_values(critic, b.ids[c], b.mask[c], b.positions[c], b.r, b.response_mask[c])
                          for c in b.micro(micro)]).clone()


def update_critic(critic, opt, b, values, returns, micro, cliprange=0.5):
    """One mini-batch (the whole batch) in micro-batches of `micro` rows: clipped value loss, token-mean over the
    batch's response tokens, grad-norm clip 1.0, an AdamW step. Returns the metrics (loss terms: last micro-batch)."""
    denominator = float(b.response_mask.sum())
    metrics = {}
    critic.train()
    opt.zero_grad(set_to_none=True)
    for c in b.micro(micro):
        m = b.response_mask[c]
        v = response_values(critic, b.ids[c], b.mask[c], b.positions[c], b.r, m)
        clipped = torch.maximum(torch.minimum(v, values[c] + cliprange), values[c] - cliprange)
        loss1, loss2 = (v - returns[c]) ** 2, (clipped - returns[c]) ** 2
        loss = 0.5 * (torch.maximum(loss1, loss2) * m).sum() / denominator
        loss.backward()
        metrics["critic/vf_loss"] = loss.item()
        metrics["critic/vf_clipfrac"] = masked_mean((loss2 > loss1).float(), m).item()
    metrics["critic/grad_norm"] = clip_(critic, 1.0)
    opt.step()
    return metrics


def update_actor(actor, opt, b, old, ref_lp, advantages, micro, kl_loss_coef):
    """One mini-batch (the whole batch) in micro-batches of `micro` rows: dual-clip PPO loss (clip 0.2, clip_ratio_c
    3) + kl_loss_coef x low_var_kl to the reference, token-mean over the batch's response tokens, the entropy metric,
    grad-norm clip 1.0, an AdamW step. Returns the metrics (loss terms: last micro-batch)."""
    denominator = float(b.response_mask.sum())
    metrics = {}
    actor.train()
    opt.zero_grad(set_to_none=True)
    for c in b.micro(micro):
        m = b.response_mask[c]
        lp, entropy = response_log_probs(actor, b.ids[c], b.mask[c], b.positions[c], b.r, with_entropy=True)
        pg, clipfrac, clipfrac_lower, ppo_kl = policy_loss(old[c], lp, advantages[c], m, denominator, 0.2, 0.2, 3.0)
        kl = low_var_kl(lp, ref_lp[c])
        loss = pg + kl_loss_coef * (kl * m).sum() / denominator
        loss.backward()
        metrics.update({"actor/pg_loss": pg.item(), "actor/pg_clipfrac": clipfrac.item(),
                        "actor/pg_clipfrac_lower": clipfrac_lower.item(), "actor/ppo_kl": ppo_kl.item(),
                        "actor/entropy": masked_mean(entropy, m).item(),
                        "actor/kl_loss": masked_mean(kl.detach(), m).item()})
    metrics["actor/grad_norm"] = clip_(actor, 1.0)
    opt.step()
    return metrics


def ppo_models(shape, lr):
    """Actor and reference (the same init), critic (its own seed, a value head), and the two AdamW optimizers."""
    actor, ref, critic = Model(shape, seed=0), Model(shape, seed=0), Model(shape, value_head=True, seed=1)
    ref.eval()
    return actor, ref, critic, optimizer(actor.parameters(), lr), optimizer(critic.parameters(), lr)


def cmd_ppo_step(a):
    """One PPO step of configs/bench_memory.yaml over configs/ppo_trainer.yaml's defaults, as `ppo train` runs it:
    16 reverse prompts of 12-16 digits x rollout.n 4 = 64 rows, responses of at most 24 tokens (EOS stops a row) at
    temperature 1; old log-probs (micro-batches of 16), reference log-probs (a third model, 16), critic values
    (critic micro-batches: 32); the reverse task's reward at the last response token; GAE (gamma = lam = 1), whitened;
    the critic update (clipped value loss, cliprange_value 0.5) and the actor update (dual-clip PPO loss, clip 0.2,
    clip_ratio_c 3, + 0.001 x low_var_kl to the reference), each one mini-batch of 64 rows in micro-batches of 32,
    token-mean, grad-norm clip 1.0, AdamW lr 1e-4, betas (0.9, 0.999), eps 1e-8, no weight decay, 1 epoch."""
    prompts_per_step, n, R, eos = 16, 4, 24, EOS
    log_prob_micro, critic_micro, update_micro = 16, 32, 32
    actor, ref, critic, opt_actor, opt_critic = ppo_models(SHAPES[a.model], 1e-4)
    gen = torch.Generator().manual_seed(0)
    names = ("generate", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor")
    phases = {k: [] for k in names}
    steps, tokens, response_tokens, scores = [], [], [], []
    for _ in range(a.steps):
        marks = [time.perf_counter()]
        rows, targets = [], []
        for _ in range(prompts_per_step):
            digits = "".join(str(d) for d in torch.randint(0, 10, (int(torch.randint(12, 17, (1,), generator=gen)),),
                                                           generator=gen).tolist())
            rows += [[BOS] + [char_id(c) for c in digits + ">"]] * n
            targets += [digits[::-1]] * n
        ids, mask = left_pad(rows)
        B = ids.shape[0]
        uniforms = torch.rand(B, R, dtype=torch.float64, generator=gen)
        with torch.inference_mode():
            actor.eval()
            responses, _, response_mask = generate(actor, ids, mask, R, uniforms, eos_id=eos)
        responses, response_mask = responses.clone(), response_mask.clone()  # normal tensors for autograd
        marks.append(time.perf_counter())
        score = torch.tensor([reverse_score(response_text(r), t) for r, t in zip(responses.tolist(), targets)])
        last = (response_mask.sum(1) - 1).clamp_min(0).long()
        token_rewards = torch.zeros(B, R)
        token_rewards[torch.arange(B), last] = score
        marks.append(time.perf_counter())
        b = Batch(torch.cat((ids, responses), 1), torch.cat((mask, response_mask.long()), 1), response_mask)
        old = infer_log_probs(actor, b, log_prob_micro)
        marks.append(time.perf_counter())
        ref_lp = infer_log_probs(ref, b, log_prob_micro)
        marks.append(time.perf_counter())
        values = infer_values(critic, b, critic_micro)
        marks.append(time.perf_counter())
        advantages, returns = gae(token_rewards, values, response_mask, gamma=1.0, lam=1.0)
        advantages, returns = advantages * response_mask, returns * response_mask
        marks.append(time.perf_counter())
        metrics = update_critic(critic, opt_critic, b, values, returns, update_micro)
        marks.append(time.perf_counter())
        metrics.update(update_actor(actor, opt_actor, b, old, ref_lp, advantages, update_micro, 0.001))
        marks.append(time.perf_counter())
        for k, t0, t1 in zip(names, marks, marks[1:]):
            phases[k].append(t1 - t0)
        steps.append(marks[-1] - marks[0])
        tokens.append(float(b.mask.sum()))
        response_tokens.append(float(response_mask.sum()))
        scores.append(float(score.mean()))
    tail = slice(1, None) if a.steps > 1 else slice(0, None)  # steps 2..S
    print(json.dumps(dict(impl="eager", torch=torch.__version__, blas=blas(), attn=f"{ATTN['train']}/{ATTN['decode']}",
                          model=a.model, threads=a.threads, steps=a.steps, rows=prompts_per_step * n,
                          step_s=round(statistics.median(steps[tail]), 4),
                          tokens_per_step=round(statistics.mean(tokens[tail]), 1),
                          response_tokens_per_step=round(statistics.mean(response_tokens[tail]), 1),
                          score_mean=round(statistics.mean(scores[tail]), 4),
                          phases={k: round(statistics.median(v[tail]), 4) for k, v in phases.items()})))


def load_batch(path):
    """A batch file (JSON, written by a C++ benchmark): rows, prompt_width, response_width; input_ids and
    attention_mask [B, P + R] (prompts left-padded, responses right-padded); old_log_probs, ref_log_probs, advantages,
    returns, values [B, R] (0 on padding); log_prob_micro, critic_micro, update_micro, lr, kl_loss_coef.
    Returns the Batch, those five tensors by name, and the file's object."""
    with open(path) as f:
        d = json.load(f)
    rows, p, r = d["rows"], d["prompt_width"], d["response_width"]
    ids = torch.tensor(d["input_ids"], dtype=torch.long)
    mask = torch.tensor(d["attention_mask"], dtype=torch.long)
    if ids.shape != (rows, p + r) or mask.shape != ids.shape:
        sys.exit(f"error: {path}: input_ids {tuple(ids.shape)}, attention_mask {tuple(mask.shape)}; "
                 f"rows x (prompt_width + response_width) is {rows} x {p + r}")
    if int(ids.min()) < 0 or int(ids.max()) >= VOCAB:
        sys.exit(f"error: {path}: token ids outside [0, {VOCAB})")
    inputs = {}
    for k in ("old_log_probs", "ref_log_probs", "advantages", "returns", "values"):
        inputs[k] = torch.tensor(d[k], dtype=torch.float32)
        if inputs[k].shape != (rows, r):
            sys.exit(f"error: {path}: {k} {tuple(inputs[k].shape)}, not rows x response_width = {rows} x {r}")
    return Batch(ids, mask, mask[:, p:].float()), inputs, d


def cmd_phases(a):
    """The training side of cmd_ppo_step on a batch from a file (no generation, reward or advantages): old
    log-probs, reference log-probs, values, the critic update and the actor update, each as cmd_ppo_step runs it,
    with the file's micro-batch sizes, lr and kl_loss_coef. The updates take the file's old/ref log-probs,
    advantages, returns and values, so both sides do the same work; the three forwards still run, for their time.
    One warm-up round, then --repeats rounds (the models train on); the median of each phase and of their sum."""
    b, x, d = load_batch(a.batch)
    actor, ref, critic, opt_actor, opt_critic = ppo_models(SHAPES[a.model], d["lr"])
    names = ("old_log_prob", "ref", "values", "update_critic", "update_actor")
    phases = {k: [] for k in names}
    totals = []
    for repeat in range(a.repeats + 1):  # the first round is the warm-up
        marks = [time.perf_counter()]
        infer_log_probs(actor, b, d["log_prob_micro"])
        marks.append(time.perf_counter())
        infer_log_probs(ref, b, d["log_prob_micro"])
        marks.append(time.perf_counter())
        infer_values(critic, b, d["critic_micro"])
        marks.append(time.perf_counter())
        update_critic(critic, opt_critic, b, x["values"], x["returns"], d["update_micro"])
        marks.append(time.perf_counter())
        update_actor(actor, opt_actor, b, x["old_log_probs"], x["ref_log_probs"], x["advantages"], d["update_micro"],
                     d["kl_loss_coef"])
        marks.append(time.perf_counter())
        if repeat > 0:
            for k, t0, t1 in zip(names, marks, marks[1:]):
                phases[k].append(t1 - t0)
            totals.append(marks[-1] - marks[0])
    print(json.dumps(dict(impl="eager", torch=torch.__version__, blas=blas(), attn=f"{ATTN['train']}/{ATTN['decode']}",
                          model=a.model, threads=a.threads, rows=b.rows, tokens=int(b.mask.sum()),
                          response_tokens=int(b.response_mask.sum()), padded_tokens=b.ids.numel(),
                          repeats=a.repeats, phases={k: round(statistics.median(v), 6) for k, v in phases.items()},
                          training_s=round(statistics.median(totals), 6))))
