/**
 * A promise with a deadline: what every "no answer within …" of the tree (mesh check's findings,
 * the broker's confirmations, the rate limit stores' calls) is made of.
 */

/**
 * `p`, or a rejection with an Error of `message` (a function: read when the time is up) after `ms`
 * when `p` has not settled by then. The timer goes as soon as `p` settles.
 */
export function withTimeout<T>(p: Promise<T>, ms: number, message: string | (() => string)): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(typeof message === 'string' ? message : message())), ms);
  });
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}
