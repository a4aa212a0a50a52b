/**
 * The Broker interface: publish bytes with headers to a topic; subscribe with an optional queue
 * group (one member of the group gets each message; without a queue every subscriber does).
 * Delivery is at most once by default. A durable subscription (SubscribeOptions.durable, on the
 * nats and http backends) is at least once: its handler returning acknowledges the message, a
 * throw or rejection asks for it again after a backoff, and after maxDeliver attempts it goes to
 * the dead-letter topic (src/engines/broker/durable.ts). Every backend passes test/broker-contract.ts.
 */

export interface Message {
  header: Record<string, string>;
  body: Uint8Array;
  /**
   * Durable deliveries: the message's id (its `Mesh-Id` header, set by the publisher when absent),
   * the same on every redelivery: the key to stay idempotent.
   */
  id?: string;
  /** Durable deliveries: this attempt's number, 1 for the first (more means a redelivery). */
  deliveryCount?: number;
}

export type MessageHandler = (message: Message, topic: string) => void | Promise<void>;

export interface SubscribeOptions {
  queue?: string;
  /**
   * At-least-once delivery under this consumer name: messages published while no subscriber of
   * the name runs are kept for it; subscribers sharing the name share the messages (one gets each).
   * Backends without durable support (memory) reject the subscription.
   */
  durable?: string;
  /** Durable: attempts before the message goes to the dead-letter topic; default the broker's (5). */
  maxDeliver?: number;
  /** Durable: a delivery not acknowledged within this is redelivered; default the broker's (30 s). */
  ackWaitMs?: number;
}

export interface Subscription {
  readonly topic: string;
  readonly queue?: string;
  /** The consumer name of a durable subscription. */
  readonly durable?: string;
  unsubscribe(): Promise<void>;
}

/** A durable consumer name of a topic, as `mesh consumers list` shows it. */
export interface ConsumerInfo {
  name: string;
  /** Messages kept for it, not yet acknowledged (delivered or not). */
  pending: number;
  /** When a subscriber of the name last ran (or it was made), ms since the epoch. */
  lastActive: number;
}

export interface Broker {
  /** Backend name: memory, http, nats. */
  readonly name: string;
  /** Connects (or starts listening); idempotent. publish/subscribe call it when needed. */
  connect(): Promise<void>;
  /** Rejects when the message could not be handed to the broker (never a silent drop). */
  publish(topic: string, message: Message): Promise<void>;
  subscribe(topic: string, handler: MessageHandler, options?: SubscribeOptions): Promise<Subscription>;
  close(): Promise<void>;
  /** Durable backends: the dead letters of a topic (its `<topic>.dlq`), oldest first, at most limit. */
  listDeadLetters?(topic: string, limit: number): Promise<Message[]>;
  /** Durable backends: publishes the topic's dead letters to it again (at most limit) and removes them; resolves with the count. */
  replayDeadLetters?(topic: string, limit: number): Promise<number>;
  /** Durable backends: the durable consumer names of a topic, by name. */
  listConsumers?(topic: string): Promise<ConsumerInfo[]>;
  /** Durable backends: removes a consumer name of a topic and what was kept for it; false when the topic has no such name. */
  removeConsumer?(topic: string, name: string): Promise<boolean>;
}

/** Thrown when the broker cannot take a message; front ends answer 503. */
export class BrokerUnavailableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'BrokerUnavailableError';
  }
}
