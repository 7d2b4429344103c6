#!/usr/bin/env node
'use strict';
/**
 * Run the example consumer with a demo handler that fails as told, printing one JSON line per event.
 *
 *   node main.js --url amqp://guest:guest@127.0.0.1:5672 --contract contracts.json --queue orders.billing \
 *       [--vhost shop] [--fail N|always] [--fail-plan '{"m1": 2, "m2": "permanent"}'] [--prefetch 10]
 *
 * `--contract -` (the default) reads the JSON from stdin. It holds one contract, or the stack output
 * `{vhost: {queue: contract}}` from which `--queue` (and `--vhost`) pick one. The handler fails the first N
 * attempts of every message (`--fail`, default 0), or what `--fail-plan` says for a message id: a number of
 * failed attempts, "always", or "permanent" (a PermanentError at the first attempt). SIGTERM or SIGINT stop
 * it gracefully; the last line is `{"event": "stopped", ...}` with the counts.
 */
const fs = require('fs');
const { consume, PermanentError } = require('./consumer');

function options(argv) {
  const parsed = { contract: '-', fail: '0', failPlan: '{}', prefetch: '10', url: process.env.RABBITMQ_URL };
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, '').replace(/-([a-z])/g, (_, c) => c.toUpperCase());
    if (!(key in parsed) && !['queue', 'vhost'].includes(key)) throw new Error(`unknown option ${argv[i]}`);
    parsed[key] = argv[i + 1];
  }
  if (!parsed.url) throw new Error('--url (or RABBITMQ_URL) is required');
  return parsed;
}

/** A single contract, or the one `queue` / `vhost` pick out of a stack output; anything else is refused. */
function pickContract(data, queue, vhost) {
  const isContract = (value) => value && typeof value === 'object' && 'queue' in value &&
    ('retry_exchange' in value || 'strategy' in value);
  const found = [];
  (function walk(value) {
    if (isContract(value)) found.push(value);
    else if (value && typeof value === 'object') Object.values(value).forEach(walk);
  }(data));
  const matching = found.filter((c) => (!queue || c.queue === queue) && (!vhost || c.vhost === vhost));
  if (matching.length !== 1) {
    throw new Error(`${matching.length} contracts match queue=${queue} vhost=${vhost}; ` +
      `available: ${found.map((c) => `${c.vhost}/${c.queue}`).join(', ')}`);
  }
  return matching[0];
}

function print(event, fields) {
  process.stdout.write(`${JSON.stringify({ event, ms: performance.now(), at: Date.now(), ...fields },
    (_, value) => (typeof value === 'bigint' ? Number(value) : value))}\n`);
}

async function main() {
  const args = options(process.argv.slice(2));
  const text = fs.readFileSync(args.contract === '-' ? 0 : args.contract, 'utf8');
  const contract = pickContract(JSON.parse(text), args.queue, args.vhost);
  const plan = JSON.parse(args.failPlan);
  const attempts = new Map();
  const counts = { acked: 0, retried: 0, parked: 0, requeued: 0 };

  async function handler(message) {
    const id = message.properties.messageId;
    const attempt = (attempts.get(id) || 0) + 1;
    attempts.set(id, attempt);
    const failures = id in plan ? plan[id] : args.fail;
    if (failures === 'permanent') throw new PermanentError(`malformed ${id}`);
    if (failures === 'always' || attempt <= Number(failures)) throw new Error(`planned failure ${attempt} of ${id}`);
  }

  const consumer = await consume({
    url: args.url, contract, handler, prefetch: Number(args.prefetch),
    onEvent(event, fields) {
      if (event in counts) counts[event] += 1;
      print(event, fields);
    },
  });
  print('ready', { queue: contract.queue, vhost: contract.vhost });
  let stopping = false;
  const stop = async (signal) => {
    if (stopping) return;
    stopping = true;
    await consumer.stop();
    print('stopped', { signal, ...counts });
    process.exit(0);
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}

main().catch((error) => {
  process.stderr.write(`node-consumer: ${error.message || error}\n`);
  process.exit(2);
});
