"""Mixed batches for the hierarchical loss: every anchor gets R1, R2 and R3 partners where the data allows.

A batch is built from identity blocks.  A block of identity i takes K samples from each of two of its states
(states with >= 2 samples first), or 2K samples of its only state; blocks are added until the batch is full
and the last slots go to groups already in the batch, so that no sample is left without partners:

* R1 (same identity, same state): every (identity, state) group in a batch has >= 2 members when the group
  has >= 2 samples in the data;
* R2 (same identity, other state): every identity with >= 2 states contributes two states;
* R3 (other identity): every batch holds >= 2 identities when the data has >= 2.

Identities are drawn from an epoch queue in which identity i appears ceil(n_i / 2K) times (so an epoch sees
about every sample once), shuffled; a batch prefers identities with >= 2 states: its first block is taken
from one whenever one is left in the queue.  Samples of a group are drawn without replacement from a
shuffled per-group pool that is refilled when empty; a sample never appears twice in one batch.

Everything is a function of (seed, epoch): ``set_epoch`` then iterate; the same pair gives the same batches.
Each batch is a list of ``(sample_index, aug_seed)`` pairs when ``with_seeds`` is set (the augmentation seed
of that slot, also a function of seed, epoch, batch and position), else a list of sample indices.
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator, Sequence

import numpy as np


def encode_labels(values: Sequence) -> tuple[np.ndarray, list]:
    """Strings (or any hashables) -> int codes in order of first appearance, and the code -> value list."""
    codes: dict = {}
    out = np.empty(len(values), dtype=np.int64)
    for n, v in enumerate(values):
        out[n] = codes.setdefault(v, len(codes))
    return out, list(codes)


class MixedBatchSampler:
    """Batches of ``batch_size`` indices into (identity, state) labelled samples; see the module docstring.

    ``identity`` and ``state`` are int arrays (see ``encode_labels``).  ``samples_per_state`` is K; it is
    lowered to ``batch_size // 4`` (but not below 2, the least that gives R1 partners) so that a batch
    holds at least two identity blocks; batches under 8 samples cannot guarantee every partner.
    ``num_batches`` defaults to ``max(1, len(identity) // batch_size)``.
    """

    def __init__(self, identity: Sequence[int], state: Sequence[int], batch_size: int, samples_per_state: int = 4,
                 seed: int = 0, num_batches: int | None = None, with_seeds: bool = False):
        self.identity = np.asarray(identity, dtype=np.int64).reshape(-1)
        self.state = np.asarray(state, dtype=np.int64).reshape(-1)
        if self.identity.shape != self.state.shape:
            raise ValueError("identity and state must have the same length")
        n = self.identity.size
        if n == 0:
            raise ValueError("no samples to draw batches from")
        if batch_size < 2:
            raise ValueError(f"batch_size must be >= 2, got {batch_size}")
        self.batch_size = min(int(batch_size), n)
        self.k = max(2, min(int(samples_per_state), self.batch_size // 4))
        self.seed = int(seed)
        self.epoch = 0
        self.with_seeds = with_seeds
        self.num_batches = int(num_batches) if num_batches is not None else max(1, n // int(batch_size))

        groups: dict[tuple[int, int], list[int]] = defaultdict(list)
        for idx, (i, s) in enumerate(zip(self.identity.tolist(), self.state.tolist(), strict=True)):
            groups[(i, s)].append(idx)
        self.groups = {key: np.asarray(v, dtype=np.int64) for key, v in sorted(groups.items())}
        states_of: dict[int, list[int]] = defaultdict(list)
        for i, s in self.groups:
            states_of[i].append(s)
        self.states_of = dict(sorted(states_of.items()))
        self.identities = list(self.states_of)
        self.multi_state = {i for i, st in self.states_of.items() if len(st) >= 2}
        self.count = {i: sum(self.groups[(i, s)].size for s in st) for i, st in self.states_of.items()}

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.num_batches

    # --- drawing ------------------------------------------------------------------------------------------

    def _identity_queue(self, rng: np.random.Generator) -> list[int]:
        block = 2 * self.k
        queue = [i for i in self.identities for _ in range(math.ceil(self.count[i] / block))]
        return [queue[j] for j in rng.permutation(len(queue))]

    def _take(self, key: tuple[int, int], n: int, in_batch: set[int], pools: dict, rng: np.random.Generator) -> list[int]:
        """Up to n samples of group ``key`` not yet in the batch, from its shuffled pool (refilled when empty)."""
        group = self.groups[key]
        out: list[int] = []
        available = group.size - sum(1 for g in group.tolist() if g in in_batch)
        n = min(n, available)
        refills = 0
        while len(out) < n:
            pool = pools.get(key)
            if not pool:
                if refills > 1:
                    break
                pools[key] = pool = [int(group[j]) for j in rng.permutation(group.size)]
                refills += 1
            # first pooled sample not in the batch; skipped ones stay in the pool
            for pos, idx in enumerate(pool):
                if idx not in in_batch:
                    pool.pop(pos)
                    out.append(idx)
                    in_batch.add(idx)
                    break
            else:
                pools[key] = []
        return out

    def _block(self, ident: int, room: int, in_batch: set[int], pools: dict, rng: np.random.Generator) -> list[int]:
        states = self.states_of[ident]
        big = [s for s in states if self.groups[(ident, s)].size >= 2]
        small = [s for s in states if self.groups[(ident, s)].size < 2]
        ranked = [big[j] for j in rng.permutation(len(big))] + [small[j] for j in rng.permutation(len(small))]
        if len(ranked) >= 2:
            per = min(self.k, room // 2)
            first = self._take((ident, ranked[0]), per, in_batch, pools, rng)
            # a short first group leaves its slots to the second one
            second = self._take((ident, ranked[1]), min(room - len(first), 2 * per - len(first)), in_batch, pools, rng)
            return first + second
        return self._take((ident, ranked[0]), min(2 * self.k, room), in_batch, pools, rng)

    def _batch(self, queue: list[int], rng: np.random.Generator, pools: dict) -> list[int]:
        batch: list[int] = []
        in_batch: set[int] = set()
        self._add_blocks(batch, in_batch, queue, rng, pools)
        self._top_up(batch, in_batch, rng, pools)
        return batch

    def _next_identity(self, queue: list[int], chosen: list[int], rng: np.random.Generator) -> int | None:
        """The next identity for a block: from the queue (a multi-state one first in a batch), else any not chosen yet."""
        if not queue:
            queue.extend(self._identity_queue(rng))
        pos = next((p for p, i in enumerate(queue) if i not in chosen and (chosen or i in self.multi_state)), None)
        if pos is None:
            pos = next((p for p, i in enumerate(queue) if i not in chosen), None)
        if pos is not None:
            return queue.pop(pos)
        # every identity of the queue is already in the batch
        fresh = [i for i in self.identities if i not in chosen]
        return fresh[int(rng.integers(len(fresh)))] if fresh else None

    def _add_blocks(self, batch: list[int], in_batch: set[int], queue: list[int], rng: np.random.Generator, pools: dict) -> None:
        """Fill the batch with identity blocks (two states of K samples each where the identity has them)."""
        chosen: list[int] = []
        while len(batch) < self.batch_size:
            room = self.batch_size - len(batch)
            if room < 4 and len(chosen) >= 2:
                break  # too few slots for a block with partners: top up the groups already here
            ident = self._next_identity(queue, chosen, rng)
            if ident is None:
                break
            chosen.append(ident)
            batch += self._block(ident, room, in_batch, pools, rng)

    def _top_up(self, batch: list[int], in_batch: set[int], rng: np.random.Generator, pools: dict) -> None:
        """Top up, keeping every sample's partners: (a) an extra member for a group already in the batch;
        (b) with >= 2 slots, a new group: another state of an identity already here (its members get R1 and
        R2), else a single-state identity; (c) with 1 slot and nothing to extend, drop one member of a group
        that has >= 3 here to make room for (b); (d) any unused sample when nothing else is possible."""
        while len(batch) < self.batch_size:
            room = self.batch_size - len(batch)
            here = {(int(self.identity[b]), int(self.state[b])) for b in batch}
            keys = sorted(here)
            got: list[int] = []
            for j in rng.permutation(len(keys)):
                got = self._take(keys[j], 1, in_batch, pools, rng)
                if got:
                    break
            if not got and room >= 2:
                got = self._new_group(here, room, in_batch, pools, rng)
            if not got and room == 1 and self._make_room(batch, here, keys, rng):
                continue
            if not got:
                rest = np.setdiff1d(np.arange(self.identity.size), np.fromiter(in_batch, np.int64, len(in_batch)))
                if rest.size == 0:
                    break
                got = [int(rest[int(rng.integers(rest.size))])]
                in_batch.add(got[0])
            batch += got

    def _new_group(self, here: set[tuple[int, int]], room: int, in_batch: set[int], pools: dict,
                   rng: np.random.Generator) -> list[int]:
        """(b): members of a state not in the batch yet, preferably of an identity already here."""
        ids_here = {i for i, _ in here}
        fresh = [key for key, g in self.groups.items() if key not in here and g.size >= 2]
        ranked = ([key for key in fresh if key[0] in ids_here]
                  or [key for key in fresh if key[0] not in self.multi_state]
                  or fresh)
        if not ranked:
            return []
        key = ranked[int(rng.integers(len(ranked)))]
        return self._take(key, min(room, self.k), in_batch, pools, rng)

    def _make_room(self, batch: list[int], here: set[tuple[int, int]], keys: list[tuple[int, int]],
                   rng: np.random.Generator) -> bool:
        """(c): drop one member of a group with >= 3 in the batch when a new group could then come in."""
        counts: dict[tuple[int, int], list[int]] = defaultdict(list)
        for b in batch:
            counts[(int(self.identity[b]), int(self.state[b]))].append(b)
        big = [key for key in keys if len(counts[key]) >= 3]
        here_ids = {i for i, _ in here}
        can_add = any(key not in here and g.size >= 2 for key, g in self.groups.items()
                      if key[0] in here_ids or key[0] not in self.multi_state)
        if not (big and can_add):
            return False
        victim = counts[big[int(rng.integers(len(big)))]][-1]
        batch.remove(victim)  # stays in in_batch: never drawn again for this batch
        return True

    def batches(self, epoch: int | None = None) -> list[list]:
        """All batches of an epoch (default: the one set by ``set_epoch``)."""
        epoch = self.epoch if epoch is None else int(epoch)
        rng = np.random.default_rng([self.seed, epoch, 0x5A11])
        queue: list[int] = []
        pools: dict = {}
        out = []
        for b in range(self.num_batches):
            batch = self._batch(queue, rng, pools)
            order = rng.permutation(len(batch))
            batch = [batch[j] for j in order]
            if self.with_seeds:
                seeds = np.random.SeedSequence([self.seed, epoch, b]).generate_state(len(batch), dtype=np.uint32)
                out.append([(idx, int(s)) for idx, s in zip(batch, seeds.tolist(), strict=True)])
            else:
                out.append(batch)
        return out

    def __iter__(self) -> Iterator[list]:
        return iter(self.batches())


def partner_report(identity: Sequence[int], state: Sequence[int], batch: Sequence[int]) -> dict[str, np.ndarray]:
    """For each anchor of ``batch``: whether it has an R1, R2, R3 partner in the batch (bool arrays)."""
    ids = np.asarray(identity)[np.asarray(batch)]
    st = np.asarray(state)[np.asarray(batch)]
    same_id = ids[:, None] == ids[None, :]
    same_st = st[:, None] == st[None, :]
    eye = np.eye(len(batch), dtype=bool)
    return {
        "r1": (same_id & same_st & ~eye).any(1),
        "r2": (same_id & ~same_st).any(1),
        "r3": (~same_id).any(1),
    }
