export { Store, encode, LongAsBigInt } from "./avro.js";
export { ActorKey, loadActorKey, derive } from "./trust.js";
export { ActorService, Actor, matches, reaches, rewardBoundsProblem, carriedReward, carriedProblem, HEADER_REWARD, MAX_REWARD_VALUE, MAX_CONFIDENCE, PROBE } from "./service.js";
export type { Agent, AgentFactory, Config, Observation, ObservationEvent, Reward, Message, TrialStarted, TrialEnded } from "./service.js";
export { tensorValues } from "./tensor.js";
export type { Tensor } from "./tensor.js";
