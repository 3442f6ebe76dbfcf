#!/usr/bin/env bash
# End-to-end: a suite with a prompt set. Every stored quality figure is
# recomputed independently in SQL from the stored per-request rows: the
# grades from the stored answers, accuracy from the grades, judge
# perplexity from the stored nll; ragged batches (left padding) must give
# the same answers as batch 1; fill-up and warm-up requests are not graded.
#
# usage: test_scored_run.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_init scored_run "$@"
need_sqlite3
db="$tmp/s.db"

if ! "$tb" run "$src/tests/data/suites/scored.ini" --db "$db" >"$tmp/out" 2>"$tmp/err"; then
    fail "scored suite exit $?"; cat "$tmp/err"
fi
grep -q "  accuracy  95% CI" "$tmp/out" || fail "no accuracy column (and its CI) in the report"
grep -q "judge ppl" "$tmp/out" || fail "no judge ppl column in the report"
[ "$(q "$db" "select count(*) from prompt")" = 3 ] || fail "prompt set not stored"
[ "$(q "$db" "select prompt_set_sha256 = '$(sha256sum "$src/tests/data/prompts/mixed.jsonl" | cut -c1-64)' from session")" = 1 ] \
    || fail "prompt set hash"
# 4 cases; per case: 1 warm-up + 2 passes x ceil(3 / batch) calls
[ "$(q "$db" "select count(*) from summary where status = 'ok' and prompt_tokens = 0")" = 4 ] || fail "cases not ok"
[ "$(q "$db" "select group_concat(n, ',') from (select count(*) n from sample s join bench_case c on c.id = s.case_id group by c.id order by c.ordinal)")" = "7,5,7,5" ] \
    || fail "calls per case: $(q "$db" "select group_concat(n, ',') from (select count(*) n from sample s join bench_case c on c.id = s.case_id group by c.id order by c.ordinal)")"
# batch 2: a pass is 2 calls = 4 requests, the 4th fills up with item 0 and is not scored
[ "$(q "$db" "select count(*) from request r join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id where c.batch = 2 and s.warmup = 0 and r.scored = 0 and r.prompt_idx = 0")" = 4 ] \
    || fail "fill-up requests must be unscored"
[ "$(q "$db" "select count(*) from request r join sample s on s.id = r.sample_id where s.warmup = 1 and r.scored = 1")" = 0 ] \
    || fail "warm-up requests must be unscored"
# grades recomputed from the stored answers: item 0 numeric (first number = 46), item 1 anything
bad=$(q "$db" "select count(*) from request r join score g on g.request_id = r.id and g.name = 'correct'
  where g.value <> case r.prompt_idx when 1 then 1 else (cast(ltrim(r.output_text, ' ') as integer) = 46
        and ltrim(r.output_text, ' ') glob '46*') end")
[ "$bad" = 0 ] || fail "$bad stored grades disagree with the answers"
# accuracy = mean of the grades of scored requests, per case; item 1 is always right
bad=$(q "$db" "select count(*) from bench_case c join metric m on m.case_id = c.id and m.name = 'accuracy'
  where abs(m.median - (select avg(g.value) from score g join request r on r.id = g.request_id join sample s on s.id = r.sample_id
        where s.case_id = c.id and r.scored = 1 and g.name = 'correct')) > 1e-12 or m.n <> 2")
[ "$bad" = 0 ] || fail "accuracy differs from the mean of the grades"
[ "$(q "$db" "select count(*) from metric where name = 'accuracy_copy' and median = 1")" = 4 ] || fail "accuracy_copy"
# judge: ppl = exp(nll) for every judged request; each case has a judge_ppl row
bad=$(q "$db" "select count(*) from score a join score b on a.request_id = b.request_id and a.name = 'judge_nll' and b.name = 'judge_ppl'
  where abs(b.value - exp(a.value)) > 1e-9 * b.value")
[ "$bad" = 0 ] || fail "judge_ppl is not exp(judge_nll)"
[ "$(q "$db" "select count(*) from metric where name = 'judge_ppl' and median > 1")" = 4 ] || fail "judge_ppl per case"
# --filter that leaves the judge no case of its own to run: it is still
# loaded (with its first case's load options) and still judges; the judged
# figures equal the unfiltered run's
fdb="$tmp/f.db"
if ! "$tb" run "$src/tests/data/suites/scored.ini" --db "$fdb" --filter backend=llada >"$tmp/fout" 2>"$tmp/ferr"; then
    fail "filtered scored suite exit $?"; cat "$tmp/ferr"
fi
[ "$(q "$fdb" "select count(*) from summary")" = 2 ] || fail "the filter should leave the 2 llada cases: $(q "$fdb" "select backend from summary")"
[ "$(q "$fdb" "select count(*) from metric where name = 'judge_ppl' and median > 1")" = 2 ] \
    || fail "judge ppl lost when the filter removes the judge's cases: $(cat "$tmp/ferr")"
sqlite3 "$db" "select c.batch, m.median from metric m join bench_case c on c.id = m.case_id join backend b on b.id = c.backend_id
  where b.label = 'llada' and m.name = 'judge_ppl' order by c.batch" >"$tmp/ppl_all"
sqlite3 "$fdb" "select c.batch, m.median from metric m join bench_case c on c.id = m.case_id where m.name = 'judge_ppl' order by c.batch" >"$tmp/ppl_f"
cmp -s "$tmp/ppl_all" "$tmp/ppl_f" || fail "filtered judge ppl differs: $(cat "$tmp/ppl_all") vs $(cat "$tmp/ppl_f")"

# the same answer (item, model) in batch 1 and in ragged batch 2: left padding is masked
bad=$(q "$db" "select count(*) from (select b.label, r.prompt_idx, count(distinct r.output_text) k from request r
  join sample s on s.id = r.sample_id join bench_case c on c.id = s.case_id join backend b on b.id = c.backend_id
  where r.status = 'ok' group by b.label, r.prompt_idx) where k <> 1")
[ "$bad" = 0 ] || fail "$bad items answered differently across batch sizes (padding leaks)"
# bad input: prompt_tokens with a prompt set, unknown judge, a judge without loglik
printf '[suite]\nrepeat=1\n[matrix]\nprompt_tokens = 8\n[prompts]\nfile = x.jsonl\njudge = nobody\n[backend a]\nplugin = null\n' >"$tmp/bad.ini"
"$tb" run "$tmp/bad.ini" --db "$tmp/bad.db" --dry-run >"$tmp/bad.out" 2>&1 && fail "bad prompts suite accepted"
grep -q "bad.ini:4: prompt_tokens: the prompts come from" "$tmp/bad.out" || fail "no error for prompt_tokens: $(cat "$tmp/bad.out")"
grep -q "bad.ini:7: judge: no \[backend nobody\]" "$tmp/bad.out" || fail "no error for judge: $(cat "$tmp/bad.out")"
printf '{"prompt": "a"}\n{"promt": "b"}\n' >"$tmp/p.jsonl"
printf '[suite]\nrepeat=1\n[prompts]\nfile = p.jsonl\njudge = a\n[backend a]\nplugin = null\n' >"$tmp/bad2.ini"
"$tb" run "$tmp/bad2.ini" --db "$tmp/bad.db" --dry-run >"$tmp/bad2.out" 2>&1 && fail "bad prompt set accepted"
grep -q "p.jsonl:2:" "$tmp/bad2.out" || fail "no file:line for a bad prompt set: $(cat "$tmp/bad2.out")"
tb_finish
