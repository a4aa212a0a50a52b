/**
 * Call policies as interceptors, the way undici composes dispatchers: a `Send` sends one call
 * (or one try of it) and resolves with what it came to; an interceptor takes the next `Send` and
 * returns one that wraps it (retry, per-try timeout, hedging, outcome reporting, tracing). A
 * chain is composed once, when its owner is built, never per call: per-call state travels in the
 * call object and per-try state in the attempt object, not in closures.
 */

import { compose as composeLayers } from '../../../base/util/compose.js';

/** Sends `call` as `attempt` (the try it starts with); resolves with its result. */
export type Send<C, A, R> = (call: C, attempt: A) => Promise<R>;

/** Wraps the next step of a chain. */
export type CallInterceptor<C, A, R> = (next: Send<C, A, R>) => Send<C, A, R>;

/** `terminal` wrapped by `interceptors`, the first one outermost (it sees the call first). */
export function compose<C, A, R>(terminal: Send<C, A, R>, interceptors: ReadonlyArray<CallInterceptor<C, A, R>>): Send<C, A, R> {
  return composeLayers(terminal, interceptors);
}
