// Command trialog-actors serves actor implementations of a Trialog spec from Go.
//
//	trialog-actors --schemas schemas --serve go_counter=rps-counter --serve go_cook=overcooked-cook
//
// Each --serve IMPL=AGENT plays the spec's (external) implementation IMPL with one of
// the example agents, as the consumer group actors.IMPL. Connection: --brokers or
// TRIALOG_BOOTSTRAP_SERVERS, --topic-prefix or TRIALOG_TOPIC_PREFIX.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/trialog/trialog/sdk/go/examples"
	"github.com/trialog/trialog/sdk/go/trialog"
)

type serveFlags []string

func (s *serveFlags) String() string     { return strings.Join(*s, ",") }
func (s *serveFlags) Set(v string) error { *s = append(*s, v); return nil }

func env(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func main() {
	var serve serveFlags
	brokers := flag.String("brokers", env("TRIALOG_BOOTSTRAP_SERVERS", "127.0.0.1:9092"), "Kafka bootstrap servers, comma-separated")
	prefix := flag.String("topic-prefix", env("TRIALOG_TOPIC_PREFIX", "trialog."), "the deployment's topic prefix")
	schemas := flag.String("schemas", "schemas", "Trialog's schemas/ directory")
	keyring := flag.String("keyring", os.Getenv("TRIALOG_KEYRING"), "keyring file (default: TRIALOG_KEY_ACTORS_<IMPL>, else the development keyring for a local broker)")
	flag.Var(&serve, "serve", "IMPL=AGENT: play implementation IMPL with AGENT (repeatable)")
	seat := flag.String("seat", "", "AGENT: play the client seat of the join token in TRIALOG_JOIN_TOKEN with AGENT")
	holder := flag.String("holder", env("TRIALOG_HOLDER", fmt.Sprintf("go-%d", os.Getpid())), "this client's holder id (keep it to resume the seat)")
	flag.Parse()
	names := make([]string, 0, len(examples.Agents))
	for n := range examples.Agents {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(serve) == 0 && *seat == "" {
		fmt.Fprintf(os.Stderr, "trialog-actors: nothing to serve: pass --serve IMPL=AGENT or --seat AGENT (agents: %s)\n", strings.Join(names, ", "))
		os.Exit(2)
	}
	store, err := trialog.LoadDir(*schemas)
	if err != nil {
		log.Fatalf("trialog-actors: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if *seat != "" {
		factory, ok := examples.Agents[*seat]
		if !ok {
			log.Fatalf("trialog-actors: --seat %q: AGENT is one of %s", *seat, strings.Join(names, ", "))
		}
		s, key, err := trialog.ParseJoinToken(os.Getenv("TRIALOG_JOIN_TOKEN"), *holder)
		if err != nil {
			log.Fatalf("trialog-actors: TRIALOG_JOIN_TOKEN: %v", err)
		}
		cfg := trialog.Config{Brokers: strings.Split(*brokers, ","), TopicPrefix: *prefix, Seat: s, Store: store, Key: key, NewAgent: factory}
		if err := trialog.Run(ctx, cfg); err != nil {
			log.Fatalf("trialog-actors: %v", err)
		}
		return
	}
	var wg sync.WaitGroup
	for _, s := range serve {
		impl, agent, _ := strings.Cut(s, "=")
		factory, ok := examples.Agents[agent]
		if impl == "" || !ok {
			log.Fatalf("trialog-actors: --serve %q: want IMPL=AGENT with AGENT one of %s", s, strings.Join(names, ", "))
		}
		key, err := trialog.LoadActorKey(impl, *keyring, strings.Split(*brokers, ","))
		if err != nil {
			log.Fatalf("trialog-actors: %v", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := trialog.Config{Brokers: strings.Split(*brokers, ","), TopicPrefix: *prefix, Implementation: impl, Store: store, Key: key, NewAgent: factory}
			if err := trialog.Run(ctx, cfg); err != nil {
				log.Printf("trialog-actors: %s: %v", impl, err)
				stop()
			}
		}()
	}
	wg.Wait()
}
