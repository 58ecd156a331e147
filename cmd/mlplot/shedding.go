package main

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"time"

	"github.com/meshlimit/meshlimit/internal/shedsim"
	"github.com/meshlimit/meshlimit/shed"
)

// The shedding picture (mlplot -shedding): two minutes of an upstream whose true capacity K
// moves from 60 to 120 to 40 in-flight requests, under a steady overload of three classes.
// The top panel draws the adaptive capacity, the requests in flight and K; one panel per class
// draws its offered (grey) and admitted (colored) requests per second.
const (
	shedSpan    = 120 * time.Second
	shedTick    = 100 * time.Millisecond
	shedBin     = time.Second
	shedBins    = int(shedSpan / shedBin)
	shedBinW    = 8 // px
	shedTopH    = 200
	shedClassH  = 110
	shedBase    = 20 * time.Millisecond
	shedMaxLine = 200 // in-flight requests at the top of the capacity panel
)

var (
	capacityC   = color.RGBA{0x1f, 0x77, 0xb4, 0xff}
	inFlightC   = color.RGBA{0xa0, 0xa0, 0xa0, 0xff}
	classColors = [...]color.RGBA{{0xc0, 0x30, 0x30, 0xff}, {0x2c, 0xa0, 0x2c, 0xff}, {0xff, 0x7f, 0x0e, 0xff}}
	classRates  = [...]float64{400, 3000, 3000} // critical, default, sheddable, per second
)

// shedding runs the simulation of the picture and draws it.
func shedding(seed uint64) *image.RGBA {
	p := shed.DefaultPolicy()
	cfg := shedsim.Config{
		Gradient: shed.DefaultGradient(), Policy: p, Base: shedBase, Noise: 0.1,
		K:    []shedsim.Change{{At: 0, K: 60}, {At: 40 * time.Second, K: 120}, {At: 80 * time.Second, K: 40}},
		Tick: shedTick, Span: shedSpan, Seed: seed,
	}
	for c, r := range classRates {
		cfg.Offered = append(cfg.Offered, shedsim.Offer{Class: c, PerSecond: r})
	}
	ticks := shedsim.Run(cfg)

	width := left + shedBins*shedBinW + right
	height := top + shedTopH + panelGap + p.Classes()*(shedClassH+panelGap) + bottom
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	fill(img, 0, 0, width, height, white)
	drawText(img, 20, 16, scale, "priority load shedding with an adaptive capacity: two minutes, one tick every 100 ms", ink)
	drawText(img, 20, 40, scale, fmt.Sprintf("upstream: %v up to k in flight, queueing above; offered 400 + 3000 + 3000 per second", shedBase), muted)

	y0 := top + shedTopH
	drawCapacity(img, y0, ticks)
	for c := range p.Classes() {
		y0 += panelGap + shedClassH
		drawClass(img, y0, c, p.Name(c), ticks)
	}
	drawShedAxis(img, y0+8)
	return img
}

// xOf maps a time to the x of the panels.
func xOf(t time.Duration) int { return left + int(int64(t)*int64(shedBins*shedBinW)/int64(shedSpan)) }

// drawCapacity draws the top panel with its baseline at y0: capacity (blue), peak in flight
// (grey) and the true capacity k (dashed red), each a step line over the ticks.
func drawCapacity(img *image.RGBA, y0 int, ticks []shedsim.Tick) {
	yOf := func(n int64) int { return y0 - int(math.Round(float64(min(n, shedMaxLine))*shedTopH/shedMaxLine)) }
	for n := int64(50); n <= shedMaxLine; n += 50 {
		fill(img, left, yOf(n), shedBins*shedBinW, 1, grid)
		label := fmt.Sprint(n)
		drawText(img, left-8-textWidth(label, scale), yOf(n)-7, scale, label, muted)
	}
	fill(img, left, y0, shedBins*shedBinW, 1, ink)
	step := func(value func(shedsim.Tick) int64, c color.Color, dashed bool) {
		prevY := -1
		for i, tk := range ticks {
			x0, x1 := xOf(tk.At-shedTick), xOf(tk.At)
			y := yOf(value(tk))
			if prevY >= 0 && !dashed {
				fill(img, x0, min(prevY, y), 2, abs(prevY-y)+2, c)
			}
			if !dashed || (i/3)%2 == 0 {
				fill(img, x0, y, x1-x0, 2, c)
			}
			prevY = y
		}
	}
	step(func(tk shedsim.Tick) int64 { return tk.Peak }, inFlightC, false)
	step(func(tk shedsim.Tick) int64 { return tk.K }, limitC, true)
	step(func(tk shedsim.Tick) int64 { return tk.Step.Limit }, capacityC, false)
	drawText(img, 20, y0-shedTopH+4, scale, "capacity", capacityC)
	drawText(img, 20, y0-shedTopH+26, scale, "in flight", inFlightC)
	drawText(img, 20, y0-shedTopH+48, scale, "true k", limitC)
	drawText(img, 20, y0-shedTopH+78, scale, "dips: probes", muted)
	drawText(img, 20, y0-shedTopH+96, scale, "of the ideal", muted)
	drawText(img, 20, y0-shedTopH+114, scale, "latency", muted)
}

// drawClass draws one class's panel with its baseline at y0: offered and admitted per second.
func drawClass(img *image.RGBA, y0, class int, name string, ticks []shedsim.Tick) {
	var offeredPerBin, admitted [shedBins]int64
	var totalOffered, totalAdmitted int64
	for _, tk := range ticks {
		b := min(int((tk.At-shedTick)/shedBin), shedBins-1)
		offeredPerBin[b] += tk.Admitted[class] + tk.Shed[class]
		admitted[b] += tk.Admitted[class]
		totalOffered += tk.Admitted[class] + tk.Shed[class]
		totalAdmitted += tk.Admitted[class]
	}
	maxBin := int64(1)
	for _, n := range offeredPerBin {
		maxBin = max(maxBin, n)
	}
	yOf := func(n int64) int { return int(math.Round(float64(n) * shedClassH / float64(maxBin))) }
	for i := range shedBins {
		h := yOf(offeredPerBin[i])
		fill(img, left+i*shedBinW, y0-h, shedBinW-2, h, offered)
		h = yOf(admitted[i])
		fill(img, left+i*shedBinW, y0-h, shedBinW-2, h, classColors[class])
	}
	fill(img, left, y0, shedBins*shedBinW, 1, ink)
	drawText(img, 20, y0-shedClassH+4, scale, name, classColors[class])
	drawText(img, 20, y0-shedClassH+26, scale, fmt.Sprintf("%d per second", int(classRates[class])), muted)
	shedPct := 100 * float64(totalOffered-totalAdmitted) / float64(max(totalOffered, 1))
	drawText(img, 20, y0-shedClassH+48, scale, fmt.Sprintf("shed %.1f%%", shedPct), muted)
}

func drawShedAxis(img *image.RGBA, y int) {
	for sec := 0; sec <= int(shedSpan/time.Second); sec += 20 {
		x := xOf(time.Duration(sec) * time.Second)
		fill(img, x, y-8, 1, 6, ink)
		label := fmt.Sprintf("%ds", sec)
		drawText(img, x-textWidth(label, scale)/2, y, scale, label, ink)
	}
}

// writePNG encodes img into the file out.
func writePNG(out string, img image.Image) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
