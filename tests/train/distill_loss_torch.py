"""fsdpp's distillation losses against the recipes' own PyTorch formulas.

    python distill_loss_torch.py FSDPP_DISTILL_LOSS_TOOL

The references below are written as each recipe computes its loss:
  - TRL's GKD generalized_jsd_loss (beta 0: forward KL, 1: reverse KL, else the mixture
    M = beta p_t + (1 - beta) p_s through logsumexp and F.kl_div(log_target=True)), with the
    teacher's top-k as TRL's top_k gathers it, averaged over tokens whose label is not -100;
  - torchtune's ForwardKLLoss and ReverseKLLoss (masked mean over tokens) and its KD recipe's
    (1 - kd_ratio) * CE + kd_ratio * KD; torchtune's forward loss is the cross-entropy of the
    teacher's distribution (its entropy + the KL), so its value is compared after subtracting
    the entropy, and its gradient as it is;
  - DistillKit's temperature: logits divided by T, the divergence multiplied by T^2.
The same cases again through fsdpp's chunked loss (chunks of 1, 4 and 7 positions, a
recomputing backward), and against a teacher given as its top-k log-probabilities (an offline
cache: Megatron's sparse top-k KD, TRL's top_k formula on the stored tokens).
fsdpp's values and gradients (fsdpp_distill_loss_tool) must match within 1e-10 in float64.
"""
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file

IGNORE = -100


def masked_mean(per_token, labels):
    mask = labels != IGNORE
    n = mask.sum()
    if n == 0:
        return per_token.sum() * 0.0
    return per_token[mask].sum() / n


def trl_generalized_jsd(student_logits, teacher_logits, labels, beta, temperature, top_k):
    student_logits = student_logits / temperature
    teacher_logits = teacher_logits / temperature
    if top_k:
        _, idx = torch.topk(teacher_logits, k=top_k, dim=-1)
        student_logits = torch.gather(student_logits, -1, idx)
        teacher_logits = torch.gather(teacher_logits, -1, idx)
    s = F.log_softmax(student_logits, dim=-1)
    t = F.log_softmax(teacher_logits, dim=-1)
    if beta == 0:
        jsd = F.kl_div(s, t, reduction="none", log_target=True)
    elif beta == 1:
        jsd = F.kl_div(t, s, reduction="none", log_target=True)
    else:
        b = torch.tensor(beta, dtype=s.dtype)
        m = torch.logsumexp(torch.stack([s + torch.log(1 - b), t + torch.log(b)]), dim=0)
        jsd = b * F.kl_div(m, t, reduction="none", log_target=True) + (1 - b) * F.kl_div(
            m, s, reduction="none", log_target=True)
    return masked_mean(jsd.sum(-1), labels) * temperature**2


def torchtune_forward_kl(student_logits, teacher_logits, labels):
    teacher_prob = F.softmax(teacher_logits, dim=-1)
    logprobs = F.log_softmax(student_logits, dim=-1)
    x = torch.sum(teacher_prob * logprobs, dim=-1).view(-1)
    mask = (labels != IGNORE).view(-1).to(x.dtype)
    if mask.sum() == 0:
        return x.sum() * 0.0
    return -torch.sum(x * mask) / torch.sum(mask)


def torchtune_reverse_kl(student_logits, teacher_logits, labels):
    student_prob = F.softmax(student_logits, dim=-1)
    student_logprob = F.log_softmax(student_logits, dim=-1)
    teacher_logprob = F.log_softmax(teacher_logits, dim=-1)
    prod = student_prob * teacher_logprob - student_prob * student_logprob
    x = torch.sum(prod, dim=-1).view(-1)
    mask = (labels != IGNORE).view(-1).to(x.dtype)
    if mask.sum() == 0:
        return x.sum() * 0.0
    return -torch.sum(x * mask) / torch.sum(mask)


def teacher_entropy(teacher_logits, labels):
    p = F.log_softmax(teacher_logits, dim=-1)
    return masked_mean(-(p.exp() * p).sum(-1), labels)


def distillkit_kl(student_logits, teacher_logits, labels, temperature):
    kl = F.kl_div(F.log_softmax(student_logits / temperature, dim=-1),
                  F.softmax(teacher_logits / temperature, dim=-1), reduction="none").sum(-1)
    return masked_mean(kl, labels) * temperature**2


def cross_entropy(student_logits, labels):
    v = student_logits.size(-1)
    if (labels != IGNORE).sum() == 0:
        return student_logits.sum() * 0.0
    return F.cross_entropy(student_logits.reshape(-1, v), labels.reshape(-1), ignore_index=IGNORE)


def main():
    tool = sys.argv[1]
    torch.manual_seed(0)
    B, T, V = 3, 5, 11
    student = torch.randn(B, T, V, dtype=torch.float64) * 3
    teacher = torch.randn(B, T, V, dtype=torch.float64) * 3
    labels = torch.randint(0, V, (B, T))
    labels[0, 1] = labels[2, 4] = labels[1, 0] = IGNORE

    # (type, beta, temperature, top_k, kd_ratio) and the reference of its kd term.
    cases = []
    for T_ in (1.0, 2.0):
        for k in (0, 4):
            for beta in (0.0, 0.3, 0.5, 1.0):
                cases.append(("generalized_jsd", beta, T_, k, 0.5,
                              lambda s, t, b=beta, T_=T_, k=k: trl_generalized_jsd(
                                  s, t, labels, b, T_, k)))
            cases.append(("forward_kl", 0.5, T_, k, 0.25,
                          lambda s, t, T_=T_, k=k: trl_generalized_jsd(s, t, labels, 0.0, T_, k)))
            cases.append(("reverse_kl", 0.5, T_, k, 0.75,
                          lambda s, t, T_=T_, k=k: trl_generalized_jsd(s, t, labels, 1.0, T_, k)))
    # torchtune's losses at temperature 1 (its recipe has none), its mix, and DistillKit's T^2.
    cases.append(("forward_kl", 0.5, 1.0, 0, 0.5,
                  lambda s, t: torchtune_forward_kl(s, t, labels) - teacher_entropy(t, labels)))
    cases.append(("reverse_kl", 0.5, 1.0, 0, 0.5,
                  lambda s, t: torchtune_reverse_kl(s, t, labels)))
    cases.append(("forward_kl", 0.5, 3.0, 0, 1.0,
                  lambda s, t: distillkit_kl(s, t, labels, 3.0)))
    n_tt_forward = len(cases) - 3
    # Chunked: every TRL case above at three chunk sizes (field 6), then the sparse teacher
    # (field 7: its top-k log-probabilities) at chunk 4.
    chunked = []
    for c in cases[:n_tt_forward]:
        for chunk in (1, 4, 7):
            chunked.append((c[0], c[1], c[2], c[3], c[4], c[5], chunk, 0))
        if c[3]:
            chunked.append((c[0], c[1], c[2], 0, c[4], c[5], 4, c[3]))
    cases = [c + (0, 0) for c in cases] + chunked
    n_tt_forward_case = n_tt_forward

    with tempfile.TemporaryDirectory() as d:
        inp, out = os.path.join(d, "in.safetensors"), os.path.join(d, "out.safetensors")
        save_file({"student": student, "teacher": teacher, "labels": labels}, inp)
        specs = [f"{c[0]},{c[1]},{c[2]},{c[3]},{c[4]},{c[6]},{c[7]}" for c in cases]
        subprocess.run([tool, inp, out, *specs], check=True)
        got = load_file(out)

    worst = 0.0
    for i, (name, beta, T_, k, ratio, ref, chunk, sparse_k) in enumerate(cases):
        s = student.clone().requires_grad_(True)
        kd = ref(s, teacher)
        ce = cross_entropy(s, labels)
        loss = (1 - ratio) * ce + ratio * kd  # torchtune's kd_ratio
        loss.backward()
        grad = s.grad
        if i == n_tt_forward_case:
            # torchtune's forward loss without the entropy term: the same gradient.
            s2 = student.clone().requires_grad_(True)
            ((1 - ratio) * cross_entropy(s2, labels) +
             ratio * torchtune_forward_kl(s2, teacher, labels)).backward()
            assert torch.allclose(s2.grad, grad, atol=1e-12, rtol=0)
        for what, want in (("kd", kd), ("ce", ce), ("loss", loss), ("grad", grad)):
            have = got[f"{what}.{i}"]
            err = (have - want.detach()).abs().max().item()
            worst = max(worst, err)
            if err > 1e-10:
                print(f"FAIL {specs[i]} {what}: fsdpp {have} vs reference {want} (|d| {err:.3g})")
                sys.exit(1)
        print(f"ok {specs[i]:<32} kd {kd.item():.6f} loss {loss.item():.6f}")
    print(f"{len(cases)} cases ({len(chunked)} of them chunked, sparse teachers included) match "
          f"TRL / torchtune / DistillKit formulas; largest difference {worst:.3g}")


if __name__ == "__main__":
    main()
