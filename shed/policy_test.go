package shed

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNewPolicyRejectsBadClassesNamingTheField(t *testing.T) {
	tests := []struct {
		name    string
		classes []Class
		def     string
		wantErr string
	}{
		{"no classes at all", nil, "x", "classes: want 1 to 8 classes, got 0"},
		{"nine classes are one too many", make([]Class, 9), "x", "classes: want 1 to 8 classes, got 9"},
		{"an empty name", []Class{{"", 0}}, "", "classes[0].name: want 1 to 32 bytes, got 0"},
		{"a name with capitals", []Class{{"Critical", 0}}, "Critical", `classes[0].name: "Critical": want only a-z, 0-9, '_' and '-'`},
		{"a repeated name", []Class{{"a", 100}, {"a", 0}}, "a", `classes[1].name: "a" repeats classes[0]`},
		{"a negative reserve", []Class{{"a", -1}, {"b", 0}}, "a", "classes[0].reserve: want 0 to 999 thousandths, got -1"},
		{"a reserve of the whole capacity", []Class{{"a", 1000}, {"b", 0}}, "a", "classes[0].reserve: want 0 to 999 thousandths, got 1000"},
		{"a reserve on the lowest class", []Class{{"a", 100}, {"b", 50}}, "a", "classes[1].reserve: the lowest class has no class below it to keep capacity from; want 0, got 50"},
		{"reserves that leave the lowest class nothing", []Class{{"a", 600}, {"b", 400}, {"c", 0}}, "a", "classes: reserves add up to 1000 thousandths; want less than 1000, so the lowest class can be admitted"},
		{"a default class that is not a class", []Class{{"a", 100}, {"b", 0}}, "c", `default_class: "c" is not one of the classes`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewPolicy(tt.classes, tt.def)
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrPolicy))
			assert.Equal(t, "shed: invalid policy: "+tt.wantErr, err.Error())
		})
	}
}

func TestDefaultPolicyShedsSheddableFrom70PercentAndDefaultFrom90Percent(t *testing.T) {
	p := DefaultPolicy()
	require.Equal(t, 3, p.Classes())
	assert.Equal(t, []string{"critical", "default", "sheddable"}, []string{p.Name(0), p.Name(1), p.Name(2)})
	assert.Equal(t, 1, p.Default())
	assert.Equal(t, []int64{100, 90, 70}, []int64{p.Threshold(100, 0), p.Threshold(100, 1), p.Threshold(100, 2)})
}

func TestThresholds(t *testing.T) {
	p := DefaultPolicy()
	tests := []struct {
		name     string
		capacity int64
		want     [3]int64 // critical, default, sheddable
	}{
		{"a capacity of zero admits nobody", 0, [3]int64{0, 0, 0}},
		{"a negative capacity is zero", -5, [3]int64{0, 0, 0}},
		{"a capacity of one is critical's alone", 1, [3]int64{1, 0, 0}},
		{"a capacity of three keeps one slot for critical", 3, [3]int64{3, 2, 2}},
		{"reserves round up, so critical never gets less than its share", 11, [3]int64{11, 9, 7}},
		{"a capacity above the maximum is the maximum", MaxCapacity + 7, [3]int64{MaxCapacity, MaxCapacity * 9 / 10, MaxCapacity * 7 / 10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := [3]int64{p.Threshold(tt.capacity, 0), p.Threshold(tt.capacity, 1), p.Threshold(tt.capacity, 2)}
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestAnUnknownOrMissingClassNameIsTheDefaultClass(t *testing.T) {
	p := DefaultPolicy()
	assert.Equal(t, 0, p.Class("critical"))
	assert.Equal(t, 2, p.Class("sheddable"))
	assert.Equal(t, 1, p.Class(""))
	assert.Equal(t, 1, p.Class("CRITICAL"), "names are exact: a client cannot promote itself by case")
	assert.Equal(t, 1, p.Class("urgent"))
	assert.Equal(t, "", p.Name(3))
	assert.Equal(t, "", p.Name(-1))
}

func TestTheZeroPolicyShedsEverything(t *testing.T) {
	var p Policy
	s, d := p.Admit(State{}, 100, 0)
	assert.False(t, d.Admitted)
	assert.Equal(t, State{}, s)
	assert.Equal(t, int64(0), p.Threshold(100, 0))
}

func TestAKeyIsHeldToItsShareOfTheCapacity(t *testing.T) {
	p, err := DefaultPolicy().WithKeyShare(250)
	require.NoError(t, err)
	assert.Equal(t, 250, p.KeyShare())
	tests := []struct {
		name     string
		capacity int64
		want     int64
	}{
		{"a quarter of 100 is 25", 100, 25},
		{"shares round up", 10, 3},
		{"every key may hold one slot, even at a capacity of 1", 1, 1},
		{"or of zero", 0, 1},
		{"a capacity above the maximum is the maximum", MaxCapacity + 1, MaxCapacity / 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, p.KeySlots(tt.capacity))
		})
	}
	d := DefaultPolicy()
	assert.Equal(t, int64(100), d.KeySlots(100), "by default a key may hold the whole capacity")
	assert.Equal(t, 1000, d.KeyShare())
}

func TestWithKeyShareRefusesAShareOutsideOneToAThousand(t *testing.T) {
	for _, share := range []int{0, -1, 1001} {
		_, err := DefaultPolicy().WithKeyShare(share)
		require.Error(t, err)
		assert.True(t, errors.Is(err, ErrPolicy))
		assert.Contains(t, err.Error(), "key_share: want 1 to 1000 thousandths")
	}
}
