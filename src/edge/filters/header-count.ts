/** More header fields than MAX_HEADER_COUNT: 431, and the connection closes after the answer. */
import { tooManyHeaderFields } from '../../base/errors.js';
import { MAX_HEADER_COUNT, tooManyHeaders } from '../../base/http/lifecycle.js';
import type { EdgeFilter } from './filter.js';
import { closeAfterAnswer } from '../../base/http/front-types.js';

export function headerCount<R>(errorId: string): EdgeFilter<R> {
  return (next) => (ex) => {
    if (tooManyHeaders(ex.req) === 0) return next(ex);
    if (ex.res) closeAfterAnswer(ex.res);
    ex.refuse(tooManyHeaderFields(errorId, MAX_HEADER_COUNT));
  };
}
