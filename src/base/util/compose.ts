/**
 * Layers around a step, the way undici composes dispatchers and Envoy chains filters: a layer
 * takes the next step and returns one that wraps it (it may go on, answer itself, or run the next
 * step inside something of its own). A chain is composed once, when its owner is built, never per
 * call. The client's call interceptors (src/core/client/interceptors/) and the edge's filters
 * (src/edge/filters/) are both composed here.
 */

/** Wraps the next step of a chain. */
export type Layer<S> = (next: S) => S;

/** `terminal` wrapped by `layers`, the first one outermost (it sees the call first). */
export function compose<S>(terminal: S, layers: ReadonlyArray<Layer<S>>): S {
  let step = terminal;
  for (let i = layers.length - 1; i >= 0; i--) step = layers[i]!(step);
  return step;
}
