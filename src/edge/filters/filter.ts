/**
 * The edge as a chain of filters. Each step a front end runs on a request before its handler (the
 * Host check, the header count and names, CORS, the path's normal form, `Mesh-Timeout`, the health
 * path, the rate limit, the route, the auth step) is a filter of its own in this folder: given the
 * next step, it returns one that goes on (calls it, now or once something answered), answers the
 * request itself (and does not), or runs the next step inside something of its own. A front end's
 * chain is composed once, when it is built (src/base/util/compose.ts, as the client composes its
 * interceptors), from the list in src/edge/filters/chains.ts that reads top to bottom; adding a
 * step is one file here and one line there (docs/architecture.md, "A request's phases").
 *
 * An upgrade request runs a chain of its own (no response object: the filters answer it on the raw
 * socket through `refuse`), of the same filters where they apply.
 */
import type { FrontRequest, FrontResponse } from '../../base/http/front-types.js';
import type { Duplex } from 'node:stream';
import type { IncomingMessage } from 'node:http';
import type { MeshError } from '../../base/errors.js';
import type { RequestTarget } from '../../base/http/target.js';
import type { CallContext } from '../../base/util/call-context.js';
import type { Layer } from '../../base/util/compose.js';

/** One request at the edge, as the filters see it. `R`: what the front end's route decides. */
export interface EdgeExchange<R = unknown> {
  readonly req: FrontRequest;
  /** The request target, parsed once (src/base/http/target.ts). */
  readonly target: RequestTarget;
  /** The answer of an HTTP request; undefined for an upgrade (answered on `upgrade.socket`). */
  readonly res: FrontResponse | undefined;
  /** An upgrade's connection and what was read past its head. */
  readonly upgrade: { readonly socket: Duplex; readonly head: Buffer; readonly req: IncomingMessage } | undefined;
  /** The request's call context (its trace); an upgrade has none of its own. */
  readonly ctx: CallContext | undefined;
  /** What the route step decided (undefined before it, or without one). */
  route: R;
  /**
   * Answers the request with error JSON, the rest of its body read and dropped: on the response, or
   * on an upgrade's raw socket (`headers` are sent with it there; on a response, set them first).
   */
  refuse(err: MeshError, headers?: Record<string, string>): void;
  /** A step past the edge failed (threw, or its promise was rejected): answered and logged as the front end does. */
  fail(err: unknown): void;
}

/** A step of the chain: it has the exchange until it answers, or hands it on. */
export type EdgeStep<R = unknown> = (exchange: EdgeExchange<R>) => void;

/** A filter: wraps the next step. */
export type EdgeFilter<R = unknown> = Layer<EdgeStep<R>>;
