/**
 * The context of the call a piece of code is serving, carried through every await by an
 * AsyncLocalStorage: the inbound call's request id (Mesh-Id), deadline, end-to-end metadata and
 * trace. A framework service handler runs inside the context of its call, so `mesh.call`, the
 * client and publishes made from it carry the call's remaining deadline, Mesh-Id, metadata and
 * trace without the handler passing them (explicit options still win). The front ends (gateway,
 * sidecar, proxy) give each request a context that holds its trace, so its calls and the log lines
 * written while it is handled carry its trace and span ids. Their rpc and proxy paths pass it
 * explicitly instead of entering it: on Node 20 the first AsyncLocalStorage.run() turns on promise
 * hooks for the whole process, which makes every promise dearer.
 *
 * The store is owned by an instance (one per Runtime): two runtimes in one process (a gateway and
 * a service in a test, two Mesh instances) never see each other's contexts. It lives in the lowest
 * layer so that everything (logging, brokers, client, servers) can reach it.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { TraceIds, type TraceContext } from './trace-context.js';

export interface CallContext {
  /** The inbound call's request id (Mesh-Id). */
  readonly id?: string;
  /** Epoch ms after which the caller no longer waits. */
  readonly deadline?: number;
  /** The caller's end-to-end headers. */
  readonly metadata?: Readonly<Record<string, string>>;
  /** This hop's trace: outgoing calls and messages name its span as their parent. */
  readonly trace?: TraceContext;
}

export class ContextStore {
  private readonly storage = new AsyncLocalStorage<CallContext>();
  /** Random ids of the process's traces and spans. */
  readonly ids = new TraceIds();

  /** The context of the call being served, or undefined outside any. */
  get current(): CallContext | undefined {
    return this.storage.getStore();
  }

  /** Runs fn (and everything it awaits or schedules) inside ctx. */
  run<R>(ctx: CallContext, fn: () => R): R {
    return this.storage.run(ctx, fn);
  }

  /** As run(), without entering ctx again when it is already the current context. */
  within<R>(ctx: CallContext, fn: () => R): R {
    return this.storage.getStore() === ctx ? fn() : this.run(ctx, fn);
  }

  /**
   * The trace of a hop that records no span (tracing off): the parent's trace id, flags and state
   * with a span id of its own, or a new trace (not sampled) when no parent came.
   */
  hop(parent: TraceContext | undefined): TraceContext {
    if (parent) return { traceId: parent.traceId, spanId: this.ids.spanId(), flags: parent.flags, state: parent.state };
    return { traceId: this.ids.traceId(), spanId: this.ids.spanId(), flags: 0 };
  }
}
