/**
 * A stream that starts every line with a prefix (`mesh run`'s `[NAME] ` before each line of an
 * app's output). Memory is bounded: a line longer than `maxLine` bytes is cut into lines of at most
 * `maxLine` bytes (at a UTF-8 character boundary), each with the prefix, so output without a
 * newline never piles up. A last line without a newline is ended with one when the input ends.
 */
import { Transform, type TransformCallback } from 'node:stream';

const NEWLINE = Buffer.from('\n');

export class LinePrefixer extends Transform {
  private readonly prefix: Buffer;
  private parts: Buffer[] = [];
  private bytes = 0;

  constructor(
    prefix: string,
    private readonly maxLine = 16 * 1024,
  ) {
    super();
    if (!(maxLine >= 4)) throw new RangeError('maxLine must be at least 4 bytes (one UTF-8 character)');
    this.prefix = Buffer.from(prefix);
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    let start = 0;
    while (start < chunk.length) {
      const nl = chunk.indexOf(10, start);
      const contentEnd = nl === -1 ? chunk.length : nl;
      const room = Math.min(contentEnd - start, this.maxLine - this.bytes);
      let take = room;
      // Cut at a character boundary: never before a UTF-8 continuation byte (10xxxxxx); bytes that
      // are not UTF-8 are cut where they fill the line.
      if (start + take < contentEnd) while (take > 0 && (chunk[start + take]! & 0xc0) === 0x80) take--;
      if (take === 0 && this.bytes === 0) take = room;
      if (take > 0) {
        this.parts.push(chunk.subarray(start, start + take));
        this.bytes += take;
        start += take;
      }
      if (start === nl) {
        this.emitLine();
        start = nl + 1;
      } else if (start < contentEnd) {
        // The line is full (or the next character does not fit): what there is goes out as a line.
        this.emitLine();
      }
    }
    done();
  }

  override _flush(done: TransformCallback): void {
    if (this.bytes > 0) this.emitLine();
    done();
  }

  private emitLine(): void {
    this.push(Buffer.concat([this.prefix, ...this.parts, NEWLINE]));
    this.parts = [];
    this.bytes = 0;
  }
}
