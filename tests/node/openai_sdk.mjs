// openai_sdk.mjs: `tokbench serve` through the official OpenAI Node SDK
// (the `openai` package pinned in package-lock.json), serving the trained
// small AR model (tests/test_openai_node.sh starts the server).
//
// usage: node openai_sdk.mjs PORT MODEL TASKS_JSONL TEXT_JSONL TOKENIZER_JSON
//
// Completions and chat completions, each streamed and not: the text is
// clean (no special-token text such as <|endoftext|>), usage counts the
// tokens generated (max_tokens = completion_tokens gives the same text,
// cut by length; one fewer gives a prefix), finish_reason is `stop` when
// the model ended by EOS and `length` when max_tokens cut it (streamed
// with and without stream_options.include_usage), and a refused request
// raises the SDK's own error classes (400 BadRequestError naming the
// field; 404 NotFoundError for an unknown model).
//
// Prints "ok: ..." / "FAIL: ..." lines; exits 1 on any failure.
import OpenAI from 'openai';
import { readFileSync } from 'node:fs';

const [port, MODEL, tasksFile, textFile, tokenizerFile] = process.argv.slice(2);
const sdkVersion = JSON.parse(readFileSync(new URL('node_modules/openai/package.json', import.meta.url), 'utf8')).version;
// maxRetries 0: a refused request is asked once (the SDK retries 408,
// 409, 429 and 5xx by default). No timeout of ours: the SDK's default
// (10 minutes) is a backstop, not a bound the test relies on.
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'unused', maxRetries: 0 });

const lines = (f) => readFileSync(f, 'utf8').split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));
// every special token of the model's tokenizer (<|endoftext|>, <|mdm_mask|>)
const specials = JSON.parse(readFileSync(tokenizerFile, 'utf8')).added_tokens.filter((t) => t.special).map((t) => t.content);

let failures = 0;
function check(cond, msg) {
    console.log((cond ? 'ok: ' : 'FAIL: ') + msg);
    if (!cond) failures++;
    return cond;
}
const show = (x) => JSON.stringify(x);
const special = (s) => specials.find((t) => s.includes(t));

// One request through the SDK, streamed or not; returns what a client
// reads: { text, finish, usage, deltas, chunks }.
async function ask(chat, prompt, opts = {}, stream = false, includeUsage = false) {
    const body = { model: MODEL, ...opts };
    if (chat) body.messages = [{ role: 'user', content: prompt }];
    else body.prompt = prompt;
    if (stream) {
        body.stream = true;
        if (includeUsage) body.stream_options = { include_usage: true };
    }
    const api = chat ? client.chat.completions : client.completions;
    const r = await api.create(body);
    if (!stream) {
        const c = r.choices[0];
        return { text: chat ? c.message.content : c.text, finish: c.finish_reason, usage: r.usage, deltas: [], n: r.choices.length };
    }
    const deltas = [];
    let finish = null, usage = null, chunks = 0, finishes = 0, usageChunks = 0, n = 0;
    for await (const chunk of r) {
        chunks++;
        if (chunk.usage) {
            usage = chunk.usage;
            usageChunks++;
        }
        for (const c of chunk.choices || []) {
            n = Math.max(n, c.index + 1);
            const t = chat ? c.delta?.content : c.text;
            if (t) deltas.push(t);
            if (c.finish_reason) {
                finish = c.finish_reason;
                finishes++;
            }
        }
    }
    return { text: deltas.join(''), finish, usage, deltas, chunks, finishes, usageChunks, n };
}

// The SDK's error for a request serve refuses: { cls, status, param, code }
// or null when the call succeeded.
async function refused(chat, opts, stream) {
    try {
        const r = await ask(chat, '93+45=', { max_tokens: 4, ...opts }, stream, stream);
        return { cls: 'none', result: r };
    } catch (e) {
        const cls = e instanceof OpenAI.BadRequestError ? 'BadRequestError'
            : e instanceof OpenAI.NotFoundError ? 'NotFoundError'
                : e instanceof OpenAI.APIError ? 'APIError' : e.constructor.name;
        return { cls, status: e.status, param: e.param, code: e.code, message: e.message };
    }
}

async function main() {
    console.log(`openai ${sdkVersion}, node ${process.version}`);
    const models = await client.models.list();
    check(models.data.length === 1 && models.data[0].id === MODEL, `models.list(): ${show(models.data.map((m) => m.id))}`);

    const tasks = lines(tasksFile);
    const texts = lines(textFile);
    // answers that end within 16 tokens: one of each task kind
    const items = ['add', 'sort', 'copy', 'lookup', 'pair'].map((tag) => tasks.find((t) => t.tags.includes(tag)).prompt);
    for (const chat of [false, true]) {
        const ep = chat ? 'chat.completions' : 'completions';
        let stops = 0, lengths = 0;
        for (const p of items) {
            const where = `${ep} ${show(p)}`;
            // ------------------------------------------------ ended by EOS
            const a = await ask(chat, p, { max_tokens: 16 });
            const n = a.usage.completion_tokens;
            const clean = !special(a.text);
            const counted = a.usage.prompt_tokens > 0 && a.usage.total_tokens === a.usage.prompt_tokens + n;
            if (!check(a.n === 1 && a.finish === 'stop' && n > 0 && n < 16 && clean && counted && a.text.length > 0,
                `${where}: ${show(a.text)}, finish_reason stop, usage ${show(a.usage)}, no special-token text`)) continue;
            for (const includeUsage of [true, false]) {
                const s = await ask(chat, p, { max_tokens: 16 }, true, includeUsage);
                const bad = s.deltas.find((d) => special(d));
                check(s.text === a.text && s.finish === 'stop' && s.finishes === 1 && s.n === 1 && bad === undefined &&
                    (includeUsage ? s.usageChunks === 1 && show(s.usage) === show(a.usage) : s.usageChunks === 0),
                    `${where} streamed${includeUsage ? ' with include_usage' : ''}: ${show(s.deltas)}, ` +
                    `finish_reason ${s.finish}, usage ${show(s.usage)}`);
            }
            stops++;
            // ------------------------------------------------ cut by max_tokens
            // exactly the tokens generated: max_tokens = completion_tokens
            // gives the same text, now cut by length; one fewer a prefix
            for (const mt of n > 1 ? [n, n - 1] : [n]) {
                const b = await ask(chat, p, { max_tokens: mt });
                const same = mt === n ? b.text === a.text : a.text.startsWith(b.text) && b.text.length < a.text.length;
                check(same && b.finish === 'length' && b.usage.completion_tokens === mt &&
                    b.usage.total_tokens === b.usage.prompt_tokens + mt && b.usage.prompt_tokens === a.usage.prompt_tokens,
                    `${where} max_tokens ${mt}: ${show(b.text)}, finish_reason ${b.finish}, usage ${show(b.usage)}`);
                const s = await ask(chat, p, { max_tokens: mt }, true, true);
                check(s.text === b.text && s.finish === 'length' && s.finishes === 1 && show(s.usage) === show(b.usage),
                    `${where} max_tokens ${mt} streamed with include_usage: finish_reason ${s.finish}, usage ${show(s.usage)}`);
                lengths++;
            }
        }
        // an open text the model does not end within 16 tokens
        const p = texts[0].prompt;
        const a = await ask(chat, p, { max_tokens: 16 });
        check(a.finish === 'length' && a.usage.completion_tokens === 16 && !special(a.text) && a.text.length > 0,
            `${ep} ${show(p)}: ${show(a.text)}, finish_reason length, 16 tokens: ${a.finish} ${show(a.usage)}`);
        const s = await ask(chat, p, { max_tokens: 16 }, true, true);
        check(s.text === a.text && s.finish === 'length' && show(s.usage) === show(a.usage),
            `${ep} ${show(p)} streamed with include_usage: the same text, finish_reason ${s.finish}, usage ${show(s.usage)}`);
        check(stops === items.length && lengths > items.length, `${ep}: ${stops} answers ended by EOS, ${lengths} cut by max_tokens`);

        // ---------------------------------------------------- refused
        const refusals = [[{ n: 2 }, 'n'], [chat ? { logprobs: true } : { logprobs: 1 }, 'logprobs']];
        for (const stream of [false, true]) {
            for (const [opts, param] of refusals) {
                const e = await refused(chat, opts, stream);
                check(e.cls === 'BadRequestError' && e.status === 400 && e.param === param && e.message.includes(param),
                    `${ep}${stream ? ' streamed' : ''} ${show(opts)}: the SDK raised ${e.cls} ${e.status} param ${e.param}: ${e.message}`);
            }
            const e = await refused(chat, { model: 'gpt-4o' }, stream);
            check(e.cls === 'NotFoundError' && e.status === 404 && e.code === 'model_not_found',
                `${ep}${stream ? ' streamed' : ''} model gpt-4o: the SDK raised ${e.cls} ${e.status} ${e.code}: ${e.message}`);
        }
    }
    console.log(failures ? `${failures} failures` : 'all OpenAI Node SDK checks passed');
    return failures ? 1 : 0;
}

main().then((rc) => process.exit(rc), (e) => {
    console.log(`FAIL: ${e.stack || e}`);
    process.exit(1);
});
