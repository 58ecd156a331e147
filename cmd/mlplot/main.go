// Command mlplot draws, for one bursty trace, the requests each rate-limit algorithm admits
// over time, one panel per algorithm, into a PNG (docs/algorithms.png via make plots).
//
// Usage:
//
//	mlplot [-o docs/algorithms.png] [-seed 1]
//	mlplot -shedding [-o docs/shedding.png] [-seed 1]   (see shedding.go)
//	mlplot -dashboard file.json [-o docs/observability.png]   (a dashboard's panels; dashboard.go)
//
// The trace is a minute of Poisson traffic at half the limit, with a burst at 3× the limit, a
// spike, and a stretch just over the limit. Grey bars are the requests offered in each 500 ms,
// colored bars those admitted; the leaky bucket's are drawn when it forwards them (after
// Decision.Delay), which shows the smoothing.
package main

import (
	"cmp"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"log"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/meshlimit/meshlimit/algorithms"
)

const (
	quota    = 10 // per second, for every algorithm
	burst    = 10 // the buckets' capacity (= quota)
	span     = 60 * time.Second
	bin      = 500 * time.Millisecond
	bins     = int(span / bin)
	binWidth = 8 // px

	left, right, top, bottom = 230, 30, 70, 30
	panelHeight, panelGap    = 140, 34
	scale                    = 2 // font pixel size
)

var (
	white   = color.RGBA{0xff, 0xff, 0xff, 0xff}
	ink     = color.RGBA{0x22, 0x22, 0x22, 0xff}
	muted   = color.RGBA{0x77, 0x77, 0x77, 0xff}
	offered = color.RGBA{0xd6, 0xd6, 0xd6, 0xff}
	grid    = color.RGBA{0xee, 0xee, 0xee, 0xff}
	limitC  = color.RGBA{0xc0, 0x30, 0x30, 0xff}
	colors  = map[algorithms.Kind]color.RGBA{
		algorithms.TokenBucket:   {0x1f, 0x77, 0xb4, 0xff},
		algorithms.LeakyBucket:   {0x2c, 0xa0, 0x2c, 0xff},
		algorithms.FixedWindow:   {0xff, 0x7f, 0x0e, 0xff},
		algorithms.SlidingLog:    {0x94, 0x67, 0xbd, 0xff},
		algorithms.SlidingWindow: {0x17, 0xbe, 0xcf, 0xff},
	}
)

// trace returns the request times (offsets from the start of a second-aligned epoch) of the
// bursty minute.
func trace(r *rand.Rand) []time.Duration {
	var at []time.Duration
	poisson := func(from, to time.Duration, perSecond float64) {
		for t := from; ; {
			t += time.Duration(r.ExpFloat64() / perSecond * float64(time.Second))
			if t >= to {
				return
			}
			at = append(at, t)
		}
	}
	poisson(0, span, quota/2)                         // background at half the limit
	poisson(8*time.Second, 14*time.Second, 2.5*quota) // a burst: 3× the limit with the background
	for i := range 24 {                               // a spike: 24 requests in 240 ms
		at = append(at, 29*time.Second+time.Duration(i)*10*time.Millisecond)
	}
	poisson(40*time.Second, 52*time.Second, 0.7*quota) // 1.2× the limit with the background
	slices.Sort(at)
	return at
}

// series is one algorithm's admitted requests per bin.
type series struct {
	limit    algorithms.Limit
	admitted []int
	total    int
}

func simulate(l algorithms.Limit, start int64, at []time.Duration) (series, error) {
	s := series{limit: l, admitted: make([]int, bins)}
	state := make([]byte, 0, l.EncodedSize())
	for _, t := range at {
		var d algorithms.Decision
		var err error
		state, d, err = l.Decide(state, start+int64(t), 1, state)
		if err != nil {
			return s, err
		}
		if !d.Allowed {
			continue
		}
		s.total++
		if b := int((t + d.Delay) / bin); b < bins { // the leaky bucket forwards after Delay
			s.admitted[b]++
		}
	}
	return s, nil
}

func main() {
	out := flag.String("o", "", "output PNG `file` (default docs/algorithms.png, or docs/shedding.png with -shedding)")
	seed := flag.Uint64("seed", 1, "trace random `seed`")
	shed := flag.Bool("shedding", false, "draw priority load shedding with an adaptive capacity instead")
	dash := flag.String("dashboard", "", "draw the panel layout of the Grafana dashboard in `file` instead")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("mlplot: ")
	if *dash != "" {
		title, panels, err := readDashboard(*dash)
		if err == nil {
			err = writePNG(cmp.Or(*out, "docs/observability.png"), dashboardMap(title, panels))
		}
		if err != nil {
			log.Fatal(err)
		}
		return
	}
	if *shed {
		if err := writePNG(cmp.Or(*out, "docs/shedding.png"), shedding(*seed)); err != nil {
			log.Fatal(err)
		}
		return
	}
	*out = cmp.Or(*out, "docs/algorithms.png")

	at := trace(rand.New(rand.NewPCG(*seed, 2)))
	perBin := make([]int, bins)
	for _, t := range at {
		perBin[int(t/bin)]++
	}
	start := int64(1_700_000_000 * time.Second)
	var all []series
	for _, k := range algorithms.Kinds {
		l := algorithms.Limit{Kind: k, Quota: quota, Window: time.Second}
		if k == algorithms.TokenBucket || k == algorithms.LeakyBucket {
			l.Burst = burst
		}
		s, err := simulate(l, start, at)
		if err != nil {
			log.Fatal(err)
		}
		all = append(all, s)
	}
	img := draw(perBin, len(at), all)
	f, err := os.Create(*out)
	if err != nil {
		log.Fatal(err)
	}
	if err := png.Encode(f, img); err != nil {
		log.Fatal(err)
	}
	if err := f.Close(); err != nil {
		log.Fatal(err)
	}
}

func draw(perBin []int, offeredTotal int, all []series) *image.RGBA {
	width := left + bins*binWidth + right
	height := top + len(all)*(panelHeight+panelGap) + bottom
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	fill(img, 0, 0, width, height, white)

	maxBin := 1
	for _, n := range perBin {
		maxBin = max(maxBin, n)
	}
	yOf := func(n int) int { return int(math.Round(float64(n) * float64(panelHeight) / float64(maxBin))) }

	drawText(img, 20, 16, scale, fmt.Sprintf("requests per 500 ms: offered (grey) and admitted, limit %d per second", quota), ink)
	drawText(img, 20, 40, scale, fmt.Sprintf("one bursty minute, %d requests, dashed red line: the limit rate", offeredTotal), muted)

	for p, s := range all {
		y0 := top + p*(panelHeight+panelGap) + panelHeight // the panel's baseline
		c := colors[s.limit.Kind]
		for n := 5; n <= maxBin; n += 5 { // light horizontal grid every 5 requests
			fill(img, left, y0-yOf(n), bins*binWidth, 1, grid)
		}
		for i, n := range perBin {
			h := yOf(n)
			fill(img, left+i*binWidth, y0-h, binWidth-2, h, offered)
		}
		for i, n := range s.admitted {
			h := yOf(n)
			fill(img, left+i*binWidth, y0-h, binWidth-2, h, c)
		}
		limitY := y0 - int(math.Round(float64(quota)*bin.Seconds()*float64(panelHeight)/float64(maxBin)))
		for x := left; x < left+bins*binWidth; x += 8 {
			fill(img, x, limitY, 4, 2, limitC)
		}
		fill(img, left, y0, bins*binWidth, 1, ink)

		name := s.limit.Kind.String()
		drawText(img, 20, y0-panelHeight+4, scale, name, c)
		detail := "quota 10/s"
		switch s.limit.Kind {
		case algorithms.TokenBucket:
			detail = "burst 10, 10/s"
		case algorithms.LeakyBucket:
			detail = "queue 10, 10/s"
		}
		drawText(img, 20, y0-panelHeight+26, scale, detail, muted)
		drawText(img, 20, y0-panelHeight+44, scale, fmt.Sprintf("admitted %d", s.total), muted)
		if s.limit.Kind == algorithms.LeakyBucket {
			drawText(img, 20, y0-panelHeight+62, scale, "(when forwarded)", muted)
		}
	}
	// Time axis under the last panel.
	yAxis := top + len(all)*(panelHeight+panelGap) - panelGap + 8
	for sec := 0; sec <= int(span/time.Second); sec += 10 {
		x := left + int(time.Duration(sec)*time.Second/bin)*binWidth
		fill(img, x, yAxis-8, 1, 6, ink)
		label := fmt.Sprintf("%ds", sec)
		drawText(img, x-textWidth(label, scale)/2, yAxis, scale, label, ink)
	}
	return img
}
