"""One continuously-batching LLM server (vLLM-like), request by request: when each gets its first and last token.

Calibration, Llama-3-8B class model, bf16, one H100-80GB (see `H100_LLAMA3_8B`):

- Linear layers (QKV/O projections, MLP, norms, rope, residual adds): microsoft/vidur,
  data/profiling/compute/h100/meta-llama/Llama-2-7b-hf/mlp.csv (tensor parallel 1), the sum of the
  per-layer median times over 32 layers, scaled by the ratio Meta-Llama-3-8B / Llama-2-7b of the same
  sums in vidur's A100 profiles (data/profiling/compute/a100/.../mlp.csv), because vidur has no H100
  profile of Llama-3-8B. The ratio is 1.04 to 1.16 across token counts (GQA shrinks QKV, the wider MLP
  grows it). Resulting 32-layer times, ms: 1 token 5.85, 32: 6.63, 128: 6.86, 256: 10.0, 512: 12.4,
  1024: 23.3, 2048: 43.0, 4096: 86.6; beyond 4096 linear at the 2048-4096 slope.
- Decode attention: memory bound, the KV cache read once per step: 128 KiB per context token
  (32 layers x 8 KV heads x 128 dims x K and V x 2 bytes) at 70% of H100 SXM's 3.35 TB/s.
  vidur's attention profiles are not in the stored snapshot (the CSVs are absent), so this is physics.
- Prefill attention: causal, 2 n^2 x 4096 x 32 FLOPs at 400 TFLOP/s (about 40% of bf16 peak).
- 2 ms per step of scheduling, sampling, input preparation and output processing: vidur's
  data/profiling/a100/cpu_overheads.csv, Llama-2-7b, batch 8, tensor parallel 1 (medians 0.17 +
  0.89 + 0.29 + 0.62 ms). Its growth with batch size (about 0.1 ms per sequence in that 2024 vLLM)
  is not modelled: vLLM V1 overlaps output processing with the next GPU step. 0.4 ms of LM head
  (a 4096 x 128256 bf16 matrix read once per step) is added to every linear time.
- KV capacity: (0.9 x 80 GB - 16.1 GB weights - 2 GB activations) / 128 KiB = 411,000 tokens.
- Scheduler: vLLM's defaults as of V1: at most 256 running sequences, 8192 batched tokens per step,
  chunked prefill mixed with the running decodes, FCFS admission while the prompt's KV fits, and
  preemption by recompute of the newest request when decode growth finds no free KV.

The check against a figure not fitted to is in aisched.sim.llm.calibration.
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ServerModel:
    """Step-time and capacity constants of one replica (one GPU)."""

    linear_ms_by_tokens: tuple[tuple[int, float], ...]
    decode_attention_s_per_context_token: float
    prefill_attention_s_per_token_squared: float
    step_overhead_s: float
    kv_capacity_tokens: int
    max_running: int = 256
    max_batched_tokens: int = 8192
    load_time_s: float = 120.0
    gpus_per_replica: int = 1

    def linear_seconds(self, tokens: int) -> float:
        """Time of the linear layers over TOKENS tokens in one forward pass, from the profile table."""
        table = self.linear_ms_by_tokens
        sizes = [size for size, _ in table]
        if tokens <= sizes[0]:
            return table[0][1] / 1000
        if tokens >= sizes[-1]:
            (n0, t0), (n1, t1) = table[-2], table[-1]
            return (t1 + (tokens - n1) * (t1 - t0) / (n1 - n0)) / 1000
        i = bisect.bisect_left(sizes, tokens)
        (n0, t0), (n1, t1) = table[i - 1], table[i]
        return (t0 + (tokens - n0) * (t1 - t0) / (n1 - n0)) / 1000

    def step_seconds(self, decodes: int, context_tokens: int, prefill_tokens: int) -> float:
        """One forward pass: DECODES one-token sequences holding CONTEXT_TOKENS, plus PREFILL_TOKENS of prompt."""
        return (
            self.step_overhead_s
            + self.linear_seconds(decodes + prefill_tokens)
            + self.decode_attention_s_per_context_token * context_tokens
            + self.prefill_attention_s_per_token_squared * prefill_tokens * prefill_tokens
        )


_KV_BYTES_PER_TOKEN = 32 * 8 * 128 * 2 * 2
H100_LLAMA3_8B = ServerModel(
    linear_ms_by_tokens=(
        (1, 6.25),  # 5.85 linear + 0.4 LM head, here and below
        (32, 7.03),
        (128, 7.26),
        (256, 10.42),
        (512, 12.84),
        (1024, 23.65),
        (2048, 43.44),
        (4096, 86.98),
    ),
    decode_attention_s_per_context_token=_KV_BYTES_PER_TOKEN / (0.7 * 3.35e12),
    prefill_attention_s_per_token_squared=2 * 4096 * 32 / 400e12,
    step_overhead_s=0.002,
    kv_capacity_tokens=411_000,
)


@dataclass(slots=True)
class Request:
    """One request's life; times in seconds from the trace's start."""

    arrival: float
    prompt_tokens: int
    output_tokens: int
    first_token_at: float | None = None
    finished_at: float | None = None
    generated: int = 0  # output tokens already produced (kept across a preemption)
    to_prefill: int = 0  # prompt (and, after a preemption, regenerated) tokens still to prefill
    decode_offset: int = 0
    epoch: int = 0  # bumped on preemption: stale heap entries are skipped

    def ttft(self) -> float:
        assert self.first_token_at is not None
        return self.first_token_at - self.arrival

    def tpot(self) -> float:
        """Mean time per output token after the first (0 for a one-token answer)."""
        assert self.first_token_at is not None and self.finished_at is not None
        if self.output_tokens <= 1:
            return 0.0
        return (self.finished_at - self.first_token_at) / (self.output_tokens - 1)


@dataclass
class Replica:
    """A server's queue, running batch and clock. `advance(until)` runs its steps up to UNTIL."""

    model: ServerModel
    created_at: float
    ready_at: float
    clock: float = 0.0
    waiting: list[Request] = field(default_factory=list)  # FCFS; index 0 is next
    prefilling: list[Request] = field(default_factory=list)
    decoding: dict[int, Request] = field(default_factory=dict)  # insertion order: newest last
    finish_heap: list[tuple[int, int, int, Request]] = field(default_factory=list)
    decoded_steps: int = 0  # decode steps run; a request's tokens = decoded_steps - its offset
    context_base: int = 0  # sum over decoding requests of (prompt + generated at join - offset)
    kv_used_prefilling: int = 0
    draining: bool = False
    finished: list[Request] = field(default_factory=list)
    first_tokens: list[Request] = field(default_factory=list)  # since the last scrape took them
    _next_id: int = 0

    def in_flight(self) -> int:
        return len(self.waiting) + len(self.prefilling) + len(self.decoding)

    def running(self) -> int:
        return len(self.prefilling) + len(self.decoding)

    def context_tokens(self) -> int:
        return self.context_base + len(self.decoding) * self.decoded_steps

    def kv_used(self) -> int:
        return self.context_tokens() + self.kv_used_prefilling

    def kv_usage(self) -> float:
        return min(1.0, self.kv_used() / self.model.kv_capacity_tokens)

    def submit(self, request: Request) -> None:
        request.to_prefill = request.prompt_tokens + request.generated
        self.waiting.append(request)

    def advance(self, until: float) -> None:
        """Run steps that start before UNTIL; an idle server's clock jumps to UNTIL."""
        self.clock = max(self.clock, self.ready_at)
        while self.clock < until:
            self._admit()
            if not self.prefilling and not self.decoding:
                self.clock = until
                return
            if self.prefilling:
                self._mixed_step()
            else:
                self._decode_steps(until)

    def _admit(self) -> None:
        free = int(0.99 * self.model.kv_capacity_tokens) - self.kv_used()
        while self.waiting and self.running() < self.model.max_running:
            head = self.waiting[0]
            need = head.to_prefill
            if need > free:
                return  # FCFS: a long prompt waits for KV room, and so does everything behind it
            self.waiting.pop(0)
            free -= need
            self.kv_used_prefilling += need
            self.prefilling.append(head)

    def _mixed_step(self) -> None:
        budget = self.model.max_batched_tokens - len(self.decoding)
        chunks: list[tuple[Request, int]] = []
        for request in self.prefilling:
            if budget <= 0:
                break
            chunk = min(request.to_prefill, budget)
            chunks.append((request, chunk))
            budget -= chunk
        prefill_tokens = sum(chunk for _, chunk in chunks)
        step = self.model.step_seconds(len(self.decoding), self.context_tokens(), prefill_tokens)
        self.clock += step
        self._run_decode_steps(1)
        for request, chunk in chunks:
            request.to_prefill -= chunk
            if request.to_prefill == 0:
                self.prefilling.remove(request)
                self.kv_used_prefilling -= request.prompt_tokens + request.generated
                self._start_decoding(request)

    def _decode_steps(self, until: float) -> None:
        """Pure-decode steps while the batch is unchanged: until a request ends, KV runs out, or UNTIL."""
        self._drop_stale()
        batch = len(self.decoding)
        room = self.model.kv_capacity_tokens - self.kv_used()
        if room < batch:
            self._preempt_newest()
            return
        to_first_finish = self.finish_heap[0][0] - self.decoded_steps
        step = self.model.step_seconds(batch, self.context_tokens() + batch * to_first_finish // 2, 0)
        steps_to_until = max(1, int((until - self.clock) / step) + 1)
        steps = max(1, min(to_first_finish, room // batch, steps_to_until))
        self.clock += steps * step
        self._run_decode_steps(steps)

    def _run_decode_steps(self, steps: int) -> None:
        if not self.decoding:
            return
        self.decoded_steps += steps
        while self.finish_heap and self.finish_heap[0][0] <= self.decoded_steps:
            _, _, epoch, request = heapq.heappop(self.finish_heap)
            if epoch != request.epoch or id(request) not in self.decoding:
                continue
            self._finish(request)

    def _start_decoding(self, request: Request) -> None:
        if request.first_token_at is None:
            request.first_token_at = self.clock
            request.generated = 1
            self.first_tokens.append(request)
        if request.generated >= request.output_tokens:
            self._finish(request, joined=False)
            return
        request.decode_offset = self.decoded_steps
        self.context_base += request.prompt_tokens + request.generated - self.decoded_steps
        self.decoding[id(request)] = request
        remaining = request.output_tokens - request.generated
        self._next_id += 1
        heapq.heappush(self.finish_heap, (self.decoded_steps + remaining, self._next_id, request.epoch, request))

    def _finish(self, request: Request, joined: bool = True) -> None:
        if joined:
            del self.decoding[id(request)]
            self.context_base -= request.prompt_tokens + request.generated - request.decode_offset
        request.generated = request.output_tokens
        request.finished_at = self.clock
        self.finished.append(request)

    def _preempt_newest(self) -> None:
        """vLLM's recompute preemption: the newest running request goes back to the queue's head."""
        request = self.decoding.pop(next(reversed(self.decoding)))
        self.context_base -= request.prompt_tokens + request.generated - request.decode_offset
        request.generated += self.decoded_steps - request.decode_offset
        request.epoch += 1
        request.to_prefill = request.prompt_tokens + request.generated
        self.waiting.insert(0, request)

    def _drop_stale(self) -> None:
        while self.finish_heap and (
            self.finish_heap[0][2] != self.finish_heap[0][3].epoch or id(self.finish_heap[0][3]) not in self.decoding
        ):
            heapq.heappop(self.finish_heap)
