from stats import mean, median


def summary(values):
    return f"mean={mean(values):.2f} median={median(values):.2f}"


if __name__ == "__main__":
    print(summary([3, 1, 4, 1, 5, 9]))
