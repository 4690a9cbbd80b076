/** Example agents: rock-paper-scissors and Overcooked. */
import { createHash } from "node:crypto";
import type { Actor, Agent, AgentFactory, ObservationEvent, Reward } from "./service.js";
import { tensorValues } from "./tensor.js";

const BEATS: Record<string, string> = { ROCK: "PAPER", PAPER: "SCISSORS", SCISSORS: "ROCK" };

/**
 * Rock-paper-scissors (examples/rps/spec.yaml): plays what beats the opponent's last move,
 * rock on the first round. `their_last_move` is a union [null, rps.Move]: wrapped as
 * {"rps.Move": "ROCK"} or null.
 */
export class Counter implements Agent {
  total = 0;

  decide(obs: ObservationEvent): string {
    const last = obs.value.their_last_move?.["rps.Move"];
    return last ? BEATS[last] : "ROCK";
  }

  /** Rewards arrive live, retroactive ones included. */
  onReward(r: Reward): void {
    this.total += r.value * r.confidence;
  }
}

/**
 * Overcooked (examples/overcooked/spec.yaml): its observation is a trialog.Tensor, its action
 * one of CoGrid's 7 moves (a long). It moves pseudo-randomly but deterministically in
 * (seed, actor, tick, observation) — replay and recovery need that.
 */
export class Cook implements Agent {
  constructor(private actor: Actor) {}

  decide(obs: ObservationEvent): bigint {
    const sum = tensorValues(obs.value).reduce((a, b) => a + b, 0);
    const h = createHash("sha256").update(`${this.actor.trial.seed}/${this.actor.spec.name}/${obs.tick}/${sum}`).digest();
    return h.readBigUInt64LE(0) % 7n;
  }
}

export const AGENTS: Record<string, AgentFactory> = {
  "rps-counter": () => new Counter(),
  "overcooked-cook": (actor) => new Cook(actor),
};
