// bench/peers/go/main.go: smarm's benchmark scenarios in Go (goroutines, unbuffered channels),
// the "go" peer of bench/peers (the contract: bench/peers/README.md).
//
//	switch_cost local             one goroutine alone calling runtime.Gosched(), GOMAXPROCS=1
//	pingpong local                two goroutines, an unbuffered chan int each way, GOMAXPROCS=1
//	pingpong remote               GOMAXPROCS=2, both goroutines locked to their own OS thread
//	pingpong remote_unlocked      GOMAXPROCS=2, no locking: the runtime places them
//	ring local, spread            a token forwarded around a ring of goroutines, GOMAXPROCS 1, 2
//	spawn waiting                 goroutines each blocked on a receive from its own channel
//	skynet depth<D>               the classic channel skynet, GOMAXPROCS=SMARM_SKYNET_SCHEDULERS
//	send_sizes <payload>          sender -> receiver with an ack every batch, GOMAXPROCS=2
//
// Go cannot place a goroutine on a scheduler (a P): where smarm puts tasks on two schedulers, the
// Go runtime decides (extra field placement=runtime; it often keeps a communicating pair on one
// P), except pingpong remote, which locks both goroutines to OS threads (placement=locked_threads).
// Messages are passed by reference, never copied (send_sizes: copies=no).
//
// Sizes come from the same SMARM_* environment variables as smarm's scripts (same defaults).
// Standard library only; builds without a module:
//
//	GOCACHE=/tmp/gocache GO111MODULE=off go build -o /tmp/go-peers bench/peers/go/main.go
//	/tmp/go-peers [scenario...]
//
// One line per configuration on stdout; progress on stderr.
package main

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

var scenarios = []string{"switch_cost", "pingpong", "ring", "spawn", "skynet", "send_sizes"}

// floorNs is the timer's own cost: the median of back-to-back time.Now() pairs, measured once.
var floorNs float64

func progress(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "go-peers: "+format+"\n", args...)
}

// knob reads a positive number from the environment, or returns the default (as smarm's
// bench.knob; fractional values are truncated).
func knob(name string, def int) int {
	v, err := strconv.ParseFloat(strings.TrimSpace(os.Getenv(name)), 64)
	if err != nil || !(v > 0) || v > math.MaxInt32 {
		return def
	}
	if int(v) < 1 {
		return 1
	}
	return int(v)
}

func measureFloor() float64 {
	const pairs = 1001
	d := make([]float64, pairs)
	for i := range d {
		t0 := time.Now()
		t1 := time.Now()
		d[i] = float64(t1.Sub(t0))
	}
	sort.Float64s(d)
	return d[pairs/2]
}

// result: pooled samples (ns per operation) and the number of measured operations.
type result struct {
	samples []float64
	ops     int
}

type opts struct {
	batch, rounds, warmup, runs, perCall int
	label                                string
}

// measure follows smarm's bench.measure: before each of `runs` runs, op(warmup) unrecorded; then
// floor(rounds/batch) samples, each the time of op(batch) less the timer's floor, divided by
// batch*perCall (clamped at 0).
func measure(op func(n int), o opts) result {
	if o.perCall < 1 {
		o.perCall = 1
	}
	per := float64(o.batch * o.perCall)
	n := o.rounds / o.batch
	if n < 1 {
		n = 1
	}
	r := result{samples: make([]float64, 0, n*o.runs), ops: n * o.batch * o.perCall * o.runs}
	lastNote := time.Now()
	for run := 1; run <= o.runs; run++ {
		op(o.warmup)
		for s := 0; s < n; s++ {
			t0 := time.Now()
			op(o.batch)
			t1 := time.Now()
			ns := float64(t1.Sub(t0)) - floorNs
			if ns > 0 {
				r.samples = append(r.samples, ns/per)
			} else {
				r.samples = append(r.samples, 0)
			}
			if t1.Sub(lastNote) > 2*time.Second {
				progress("%s: run %d of %d", o.label, run, o.runs)
				lastNote = t1
			}
		}
	}
	return r
}

// num formats as smarm's report does: integers plain, other numbers with three decimals.
func num(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

// nearest-rank percentile of sorted samples
func quantile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return sorted[i]
}

// report prints one configuration's line; extra fields follow in key order (as smarm's report).
func report(scenario, variant string, schedulers int, r result, extra map[string]string) {
	s := append([]float64(nil), r.samples...)
	sort.Float64s(s)
	mean := 0.0
	for _, v := range s {
		mean += v
	}
	if len(s) > 0 {
		mean /= float64(len(s))
	}
	max := 0.0
	if len(s) > 0 {
		max = s[len(s)-1]
	}
	parts := []string{
		"scenario=" + scenario, "variant=" + variant, "peer=go",
		"schedulers=" + strconv.Itoa(schedulers),
		"p50_ns=" + num(quantile(s, 0.5)), "p90_ns=" + num(quantile(s, 0.9)),
		"p99_ns=" + num(quantile(s, 0.99)), "p999_ns=" + num(quantile(s, 0.999)),
		"max_ns=" + num(max), "per_op_ns=" + num(mean), "ops=" + strconv.Itoa(r.ops),
	}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		parts = append(parts, k+"="+extra[k])
	}
	fmt.Println(strings.Join(parts, " "))
}

// ---- switch_cost -----------------------------------------------------------------------------

func switchCost() {
	runtime.GOMAXPROCS(1)
	o := opts{
		rounds: knob("SMARM_SWITCH_ROUNDS", 1000000),
		warmup: knob("SMARM_SWITCH_WARMUP", 10000),
		runs:   knob("SMARM_SWITCH_RUNS", 5),
		batch:  knob("SMARM_SWITCH_BATCH", 1000),
		label:  "switch_cost local",
	}
	// The main goroutine is the only runnable one: each Gosched goes through the scheduler and
	// comes straight back.
	r := measure(func(n int) {
		for i := 0; i < n; i++ {
			runtime.Gosched()
		}
	}, o)
	report("switch_cost", "local", 1, r, nil)
}

// ---- pingpong --------------------------------------------------------------------------------

func pingpongOne(variant string, procs int, lock bool, placement string) {
	runtime.GOMAXPROCS(procs)
	o := opts{
		rounds: knob("SMARM_PINGPONG_ROUNDS", 200000),
		warmup: knob("SMARM_PINGPONG_WARMUP", 5000),
		runs:   knob("SMARM_PINGPONG_RUNS", 5),
		batch:  knob("SMARM_PINGPONG_BATCH", 100),
		label:  "pingpong " + variant,
	}
	ping, pong := make(chan int), make(chan int)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if lock {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
		}
		for {
			m := <-ping
			if m == 0 {
				return
			}
			pong <- m
		}
	}()
	if lock {
		// the measuring goroutine (main) on its own thread too: two goroutines, two threads
		runtime.LockOSThread()
	}
	r := measure(func(n int) {
		for i := 0; i < n; i++ {
			ping <- 1
			<-pong
		}
	}, o)
	ping <- 0
	wg.Wait()
	if lock {
		runtime.UnlockOSThread()
	}
	var extra map[string]string
	if placement != "" {
		extra = map[string]string{"placement": placement}
	}
	report("pingpong", variant, procs, r, extra)
}

func pingpong() {
	pingpongOne("local", 1, false, "")
	pingpongOne("remote", 2, true, "locked_threads")
	pingpongOne("remote_unlocked", 2, false, "runtime")
}

// ---- ring ------------------------------------------------------------------------------------

func ringOne(variant string, procs int) {
	runtime.GOMAXPROCS(procs)
	actors := knob("SMARM_RING_ACTORS", 1000)
	hops := knob("SMARM_RING_HOPS", 1000000)
	runs := knob("SMARM_RING_RUNS", 3)
	chans := make([]chan int, actors)
	for i := range chans {
		chans[i] = make(chan int)
	}
	lap := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(actors)
	for i := 0; i < actors; i++ {
		// A member forwards every token (the hops left) to the next; the one that takes the last
		// hop tells the owner. Stop (0) runs once around; the last member does not pass it on to
		// the first, which has already exited (smarm drops a send to a dead actor; a Go send
		// would block forever).
		go func(i int) {
			defer wg.Done()
			in, next := chans[i], chans[(i+1)%actors]
			last := i == actors-1
			for {
				left := <-in
				if left == 0 {
					if !last {
						next <- 0
					}
					return
				}
				if left == 1 {
					lap <- struct{}{}
				} else {
					next <- left - 1
				}
			}
		}(i)
	}
	laps := hops / actors
	if laps < 1 {
		laps = 1
	}
	first := chans[0]
	r := measure(func(n int) {
		for i := 0; i < n; i++ {
			first <- actors // one lap: actors hops, then back to us
			<-lap
		}
	}, opts{batch: 1, rounds: laps, warmup: 2, runs: runs, perCall: actors,
		label: "ring " + variant})
	first <- 0
	wg.Wait()
	extra := map[string]string{"actors": strconv.Itoa(actors)}
	if variant == "spread" {
		extra["placement"] = "runtime"
	}
	report("ring", variant, procs, r, extra)
}

func ring() {
	ringOne("local", 1)
	ringOne("spread", 2)
}

// ---- spawn -----------------------------------------------------------------------------------

func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}

func medianOf(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[(len(s)+1)/2-1] // as smarm: t[ceil(#t / 2)]
}

func spawn() {
	runtime.GOMAXPROCS(1)
	actors := knob("SMARM_SPAWN_ACTORS", 100000)
	runs := knob("SMARM_SPAWN_RUNS", 3)
	const batch = 100
	var r result
	rssPer := make([]float64, 0, runs)
	releaseNs := make([]float64, 0, runs)
	for run := 1; run <= runs; run++ {
		runtime.GC()
		// also hand freed memory back to the OS, so that a run does not refill pages the
		// previous run left resident (the baseline would then hide the growth)
		debug.FreeOSMemory()
		rss0 := rssBytes()
		// Each waiter blocks on a receive from its own channel (its mailbox); making that
		// channel is part of the timed spawn.
		boxes := make([]chan int, actors)
		var ready, done sync.WaitGroup
		ready.Add(actors)
		done.Add(actors)
		for i := 0; i < actors; i += batch {
			end := i + batch
			if end > actors {
				end = actors
			}
			t0 := time.Now()
			for k := i; k < end; k++ {
				box := make(chan int)
				boxes[k] = box
				go func() {
					ready.Done()
					<-box
					done.Done()
				}()
			}
			d := time.Since(t0)
			// as smarm's spawn.lua: per-spawn time of the batch, no floor subtracted
			r.samples = append(r.samples, float64(d)/float64(end-i))
			if i%10000 == 0 {
				runtime.Gosched() // let them reach their receive
			}
		}
		ready.Wait() // every waiter ran and is (about to be) blocked on its receive
		for i := 0; i < 10; i++ {
			runtime.Gosched()
		}
		rssPer = append(rssPer, float64(rssBytes()-rss0)/float64(actors))
		t0 := time.Now()
		for _, box := range boxes {
			box <- 0
		}
		done.Wait() // every waiter got its message and is leaving
		releaseNs = append(releaseNs, float64(time.Since(t0))/float64(actors))
		boxes = nil
		progress("spawn: run %d of %d: rss %.0f B/actor, release %.1f ns/actor", run, runs,
			rssPer[len(rssPer)-1], releaseNs[len(releaseNs)-1])
	}
	r.ops = actors * runs
	report("spawn", "waiting", 1, r, map[string]string{
		"actors":               strconv.Itoa(actors),
		"rss_per_actor_bytes":  strconv.FormatInt(int64(math.Floor(medianOf(rssPer))), 10),
		"release_ns_per_actor": num(medianOf(releaseNs)),
	})
}

// ---- skynet ----------------------------------------------------------------------------------

// skynetNode sends the sum of its subtree's leaf numbers to parent; leaves send their number.
func skynetNode(parent chan<- int, num, size int) {
	if size == 1 {
		parent <- num
		return
	}
	rc := make(chan int)
	child := size / 10
	for i := 0; i < 10; i++ {
		go skynetNode(rc, num+i*child, child)
	}
	sum := 0
	for i := 0; i < 10; i++ {
		sum += <-rc
	}
	parent <- sum
}

func skynet() {
	depth := knob("SMARM_SKYNET_DEPTH", 5)
	runs := knob("SMARM_SKYNET_RUNS", 3)
	procs := knob("SMARM_SKYNET_SCHEDULERS", 2)
	if depth > 8 {
		fmt.Fprintln(os.Stderr, "go-peers: skynet: SMARM_SKYNET_DEPTH above 8 is not supported")
		os.Exit(2)
	}
	runtime.GOMAXPROCS(procs)
	actors, leaves := 0, 1
	for l := 0; l <= depth; l++ {
		actors += leaves
		if l < depth {
			leaves *= 10
		}
	}
	var r result
	for run := 1; run <= runs; run++ {
		t0 := time.Now()
		// the top node is this goroutine: it spawns ten children and sums their results
		rc := make(chan int)
		child := leaves / 10
		if depth == 0 {
			go skynetNode(rc, 0, 1)
		} else {
			for i := 0; i < 10; i++ {
				go skynetNode(rc, i*child, child)
			}
		}
		sum := 0
		for i := 0; i < 10 && (depth > 0 || i == 0); i++ {
			sum += <-rc
		}
		d := time.Since(t0)
		if want := leaves * (leaves - 1) / 2; sum != want {
			fmt.Fprintf(os.Stderr, "go-peers: skynet: wrong sum %d (want %d)\n", sum, want)
			os.Exit(1)
		}
		r.samples = append(r.samples, float64(d)) // one sample: the whole tree, in ns
		progress("skynet: run %d of %d: %.0f ms (sum %d ok)", run, runs,
			float64(d)/1e6, sum)
	}
	r.ops = runs
	report("skynet", "depth"+strconv.Itoa(depth), procs, r,
		map[string]string{"actors": strconv.Itoa(actors)})
	sort.Float64s(r.samples)
	progress("skynet: %.1f ns per actor", quantile(r.samples, 0.5)/float64(actors))
}

// ---- send_sizes ------------------------------------------------------------------------------

func sendSizes() {
	runtime.GOMAXPROCS(2)
	rounds := knob("SMARM_SEND_ROUNDS", 50000)
	runs := knob("SMARM_SEND_RUNS", 3)
	batch := knob("SMARM_SEND_BATCH", 100)
	if rounds < batch {
		rounds = batch
	}
	table := make(map[string]int, 100)
	for i := 1; i <= 100; i++ {
		table["field"+strconv.Itoa(i)] = i
	}
	payloads := []struct {
		variant string
		msg     interface{}
	}{
		{"string_8B", strings.Repeat("x", 8)},
		{"string_1KiB", strings.Repeat("x", 1024)},
		{"string_64KiB", strings.Repeat("x", 65536)},
		{"table_100_fields", table},
	}
	for _, p := range payloads {
		// The message is boxed once (an interface value): a send passes a reference, nothing is
		// copied or allocated per message. nil tells the receiver to stop.
		msg := p.msg
		data := make(chan interface{})
		ack := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := 0
			for {
				m := <-data
				if m == nil {
					return
				}
				got++
				if got == batch {
					got = 0
					ack <- struct{}{}
				}
			}
		}()
		// n is always a multiple of batch (batch or the warm-up of 10 batches). The sender waits
		// for each batch's ack before the next batch: with an unbuffered ack channel, sending all
		// n first (as smarm's sender does into a mailbox) would deadlock.
		r := measure(func(n int) {
			for sent := 0; sent < n; sent += batch {
				for i := 0; i < batch; i++ {
					data <- msg
				}
				<-ack
			}
		}, opts{batch: batch, rounds: rounds, warmup: batch * 10, runs: runs,
			label: "send_sizes " + p.variant})
		data <- nil
		wg.Wait()
		report("send_sizes", p.variant, 2, r,
			map[string]string{"copies": "no", "placement": "runtime"})
	}
}

func main() {
	wanted := map[string]bool{}
	for _, a := range os.Args[1:] {
		ok := false
		for _, s := range scenarios {
			if a == s {
				ok = true
			}
		}
		if !ok {
			fmt.Fprintf(os.Stderr, "go-peers: unknown scenario %q (known: %s)\n", a,
				strings.Join(scenarios, " "))
			os.Exit(2)
		}
		wanted[a] = true
	}
	floorNs = measureFloor()
	progress("%s, %d CPUs, timer floor %.1f ns", runtime.Version(), runtime.NumCPU(), floorNs)
	run := map[string]func(){
		"switch_cost": switchCost, "pingpong": pingpong, "ring": ring,
		"spawn": spawn, "skynet": skynet, "send_sizes": sendSizes,
	}
	for _, s := range scenarios {
		if len(wanted) == 0 || wanted[s] {
			start := time.Now()
			run[s]()
			progress("%s: done in %.1f s", s, time.Since(start).Seconds())
		}
	}
}
