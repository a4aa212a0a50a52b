/**
 * The Broker interface: publish bytes with headers to a topic; subscribe with an optional queue
 * group (one member of the group gets each message; without a queue every subscriber does).
 * Delivery is at most once. Every backend passes test/broker-contract.ts.
 */

export interface Message {
  header: Record<string, string>;
  body: Uint8Array;
}

export type MessageHandler = (message: Message, topic: string) => void | Promise<void>;

export interface SubscribeOptions {
  queue?: string;
}

export interface Subscription {
  readonly topic: string;
  readonly queue?: string;
  unsubscribe(): Promise<void>;
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
}

/** Thrown when the broker cannot take a message; front ends answer 503. */
export class BrokerUnavailableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'BrokerUnavailableError';
  }
}
