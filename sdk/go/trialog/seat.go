package trialog

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Seat is one client actor of one trial, played from outside the actor services
// (docs/protocol.md, "Client actors (seats)").
type Seat struct {
	Trial, Actor string
	Holder       string // the id this client keeps across reconnects: the same holder resumes the seat
}

// ActorJoined announces a seat's holder.
type ActorJoined struct {
	TrialID        string `avro:"trial_id"`
	Actor          string `avro:"actor"`
	Implementation string `avro:"implementation"`
}

// ParseJoinToken reads a join token ("tl1.<payload>.<mac>", minted by the operator's
// controller or the gateway): the seat and its key. The token's MAC is for the minter
// to check; a client learns whether it was honoured from the log (its records count).
func ParseJoinToken(token, holder string) (*Seat, ActorKey, error) {
	parts := strings.Split(strings.TrimSpace(token), ".")
	if len(parts) != 3 || parts[0] != "tl1" {
		return nil, ActorKey{}, fmt.Errorf("not a Trialog join token (want tl1.<payload>.<mac>)")
	}
	raw, err := unb64(parts[1])
	if err != nil {
		return nil, ActorKey{}, fmt.Errorf("join token payload: %w", err)
	}
	var claims struct {
		Actor   string `json:"actor"`
		Trial   string `json:"trial"`
		SeatKey string `json:"seat_key"`
	}
	if err := json.Unmarshal(raw, &claims); err != nil || claims.Actor == "" || claims.Trial == "" {
		return nil, ActorKey{}, fmt.Errorf("join token claims are not {actor, trial, seat_key, exp}: %v", err)
	}
	key, err := unb64(claims.SeatKey)
	if err != nil || len(key) == 0 {
		return nil, ActorKey{}, fmt.Errorf("join token seat key: %v", err)
	}
	return &Seat{Trial: claims.Trial, Actor: claims.Actor, Holder: holder}, ActorKey{ID: "seat." + claims.Actor, Secret: key}, nil
}

// plays says whether this service plays an actor of a trial.
func (s *Service) plays(spec ActorSpec) bool {
	if s.cfg.Seat != nil {
		return spec.Client && spec.Name == s.cfg.Seat.Actor
	}
	return spec.Implementation == s.cfg.Implementation && !spec.Client
}

// join answers the trial.pending of the seat's trial with actor.joined (once: a
// repeat of the same join is the same event, crossed off during catch-up).
func (s *Service) join(r *kgo.Record, trialID string) {
	var pending TrialStarted
	if _, err := s.cfg.Store.Decode(r.Value, &pending); err != nil || pending.TrialID != trialID {
		return
	}
	for _, spec := range pending.Actors {
		if s.plays(spec) {
			joined := ActorJoined{TrialID: trialID, Actor: spec.Name, Implementation: spec.Implementation}
			if err := s.emitEvent(r.Partition, "actor.joined", "trialog.ActorJoined", -1, spec.Name, "", "", trialID, &joined); err != nil {
				s.log.Printf("trialog: cannot join: %v", err)
			}
			return
		}
	}
	s.log.Printf("trialog: trial %s has no client actor %s", trialID, s.cfg.Seat.Actor)
}
